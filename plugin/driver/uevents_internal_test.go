package driver

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/efakit/efakit/plugin/driver/uevents"
)

// TestStartUeventsOpenFails: a source that cannot be opened leaves the
// plugin without a watch, and stop returns at once.
func TestStartUeventsOpenFails(t *testing.T) {
	p := &Plugin{rescans: newRescanQueue()}
	defer p.Close()
	p.startUevents(t.Context(), func() (uevents.Source, error) { return nil, errors.New("permission denied") })()
	p.startUevents(t.Context(), nil)()
	assert.Zero(t, p.rescans.Len(), "a rescan asked for without a source")
}

// TestKernelUeventKicks: with the kernel's socket, a uevent of a PCI
// function (written to its uevent file, as root) asks Run for a rescan
// within a second.
func TestKernelUeventKicks(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("/sys/bus/pci/devices/*/uevent")
	if len(files) == 0 || os.Geteuid() != 0 {
		t.Skip("needs root and a PCI function in /sys to send a uevent")
	}
	p := &Plugin{rescans: newRescanQueue()}
	defer p.Close()
	stop := p.startUevents(t.Context(), uevents.Kernel)
	defer stop()
	if err := os.WriteFile(files[0], []byte("change"), 0); err != nil {
		t.Skipf("cannot send a uevent through %s: %v", files[0], err)
	}
	got := make(chan []rescanReason, 1)
	go func() { r, _ := take(p.rescans); got <- r }()
	select {
	case r := <-got:
		assert.Equal(t, []rescanReason{rescanUevent}, r, "a uevent's scan reads sysfs only")
	case <-time.After(time.Second):
		t.Fatal("no rescan within a second of a PCI uevent")
	}
}
