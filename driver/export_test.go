package driver

// LockDataDir exposes the restore lock to the external tests.
var LockDataDir = lockDataDir
