package sysfs

import "github.com/efakit/efakit/internal/linkpath"

// OpenDirFallback opens dir as OpenDir does where openat2 is missing, so
// that the os.Root path is tested on every kernel.
func OpenDirFallback(dir string) (*Root, error) { return openRootFS(dir) }

var DecodeCapture = decodeCapture

type Capture = capture

var OpenDir = openDir
var MaxPathDepth = maxPathDepth
var MaxPathLen = maxPathLen
var CaptureHeader = captureHeader

// CheckLink is the link check WriteDir and snapshot make.
var CheckLink = linkpath.CheckLink
