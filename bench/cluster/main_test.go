package cluster

import (
	"os"
	"testing"

	"github.com/efakit/efakit/test/e2e/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.StopShared()
	os.Exit(code)
}
