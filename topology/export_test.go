package topology

// The unexported parsers, for the tests of package topology_test.

var PCILink = pCILink
