package sysfs

// OpenDirFallback opens dir as OpenDir does where openat2 is missing, so
// that the os.Root path is tested on every kernel.
func OpenDirFallback(dir string) (*Root, error) { return openRootFS(dir) }

var DecodeCapture = decodeCapture

type Capture = capture

var OpenDir = openDir
var MaxPathDepth = maxPathDepth
var MaxPathLen = maxPathLen
var CaptureHeader = captureHeader
