package efa

// The unexported parsers, for the tests of package efa_test.

var IsEFAID = isEFAID
var ParseCounter = parseCounter
var ParseEnumAttr = parseEnumAttr
var ParseGDR = parseGDR
var ParseRate = parseRate
var VendorAmazon = vendorAmazon
