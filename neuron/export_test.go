package neuron

// ParseIndex is parseIndex, for the fuzz target.
var ParseIndex = parseIndex
var ParseConnected = parseConnected
var ParseCoreCount = parseCoreCount
var DriverName = driverName
