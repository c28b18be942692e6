package driver

// NetnsCheck exposes the RDMA namespace check to the external tests.
var NetnsCheck = netnsCheck
