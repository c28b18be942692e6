package driver

import "context"

// LockDataDir exposes the restore lock to the external tests.
var LockDataDir = lockDataDir

// CheckStorage exposes the storage check to the external tests.
func (p *Plugin) CheckStorage(ctx context.Context) { p.checkStorage(ctx) }
