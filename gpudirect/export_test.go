package gpudirect

// The unexported parsers, for the tests of package gpudirect_test.

var Coherent = coherent
var DriverBranch = driverBranch
var KernelVersion = kernelVersion
var ParseParams = parseParams
var ReadACS = readACS
var SourceNVIDIATopology = sourceNVIDIATopology
var SourceDMABuf = sourceDMABuf
var SourceEFAP2P = sourceEFAP2P
var SourceACS = sourceACS
var SourceNVIDIADriver = sourceNVIDIADriver
var KernelReleaseFile = kernelReleaseFile
var NVIDIAParamsFile = nVIDIAParamsFile
var TopoCheckOverride = topoCheckOverride
