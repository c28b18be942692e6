package pcie

// The unexported parsers, for the tests of package pcie_test.

var ParseACS = parseACS
var ParseHexAttr = parseHexAttr
var ParseIOMMUGroup = parseIOMMUGroup
var ParseLinkSpeed = parseLinkSpeed
var ParseLinkWidth = parseLinkWidth
var ParseNUMANode = parseNUMANode
var ParseUevent = parseUevent
var ACSDirectTranslated = acsDirectTranslated
var ACSEgressControl = acsEgressControl
var ACSTranslationBlocking = acsTranslationBlocking
var ACSSourceValidation = acsSourceValidation
var ACSRequestRedirect = acsRequestRedirect
var ACSCompletionRedirect = acsCompletionRedirect
var ACSUpstreamForwarding = acsUpstreamForwarding
var ClassBridgeHost = classBridgeHost
var ClassBridgeOther = classBridgeOther
var ClassBridgePCI = classBridgePCI
var ClassDisplay3D = classDisplay3D
var ClassDisplayVGA = classDisplayVGA
var ClassNetwork = classNetwork
var ConfigSize = configSize

type Uevent = uevent

var ConfigSizeExpress = configSizeExpress
var ConfigUnprivileged = configUnprivileged
