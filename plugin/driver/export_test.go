package driver

import "context"

// CheckStorage exposes the storage check to the external tests.
func (p *Plugin) CheckStorage(ctx context.Context) { p.claims.CheckStorage(ctx) }
