package uevent

// The unexported parsers, for the tests of package uevent_test.

var Parse = parse
