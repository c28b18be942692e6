package gpudirect

// The unexported parsers, for the tests of package gpudirect_test.

var Coherent = coherent
var DriverBranch = driverBranch
var KernelVersion = kernelVersion
var ParseParams = parseParams
var ReadACS = readACS
