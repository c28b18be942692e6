package driver_test

// Helpers several of the package's tests use.

import (
	"testing"

	"github.com/efakit/efakit/plugin/driver/internal/drivertest"
	"github.com/efakit/efakit/sysfs"
)

// node is the node the tests' plugins run on.
const node = "node-1"

// renumbered is the p5 fixture after a module reload renumbered its uverbs
// devices (drivertest.Renumbered).
func renumbered(t testing.TB, to map[int]int) *sysfs.MemFS { return drivertest.Renumbered(t, p5, to) }
