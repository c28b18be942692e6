package pcie

// The unexported parsers, for the tests of package pcie_test.

var ParseACS = parseACS
var ParseHexAttr = parseHexAttr
var ParseIOMMUGroup = parseIOMMUGroup
var ParseLinkSpeed = parseLinkSpeed
var ParseLinkWidth = parseLinkWidth
var ParseNUMANode = parseNUMANode
var ParseUevent = parseUevent
