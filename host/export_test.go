package host

// ParseNodeID is parseNodeID, for the fuzz target.
var ParseNodeID = parseNodeID
var ParseDistances = parseDistances
var ParseSocket = parseSocket
var NodeDir = nodeDir
