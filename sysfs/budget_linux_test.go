package sysfs_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
)

// syscallBudget is what the plugin's periodic scan (internal/placed: the
// placed devices' NUMA nodes, CPUs and IOMMU groups, the EFAs' gdr files,
// which GPUDirect readiness needs and gpudirect.Assess used to read apart,
// at every health check) may cost on each fixture, unpacked
// on disk and read through the openat2 root, in the system calls the
// Reader decides to make (openat2, fstat, read, close, readlinkat):
// counted in the root itself, never with strace. getdents64 is held to its
// own bound instead (TestSyscallBudget says why). Each figure is what it
// costs today; a change that needs more fails here and must say why in
// this table.
var syscallBudget = map[string]int{
	"g5.8xlarge":    130,
	"m5.xlarge":     47,
	"p4d.24xlarge":  562,
	"p4de.24xlarge": 562,
	// The switches' 14 downstream ports of the public lstopo, 48 of them
	// empty, are most of it.
	"p5.48xlarge": 2895,
	// p5's and the files of two NUMA nodes more (2 x 3 files).
	"p5e.48xlarge":  2919,
	"p5en.48xlarge": 1888,
	// AWS's NIC table's layout: 4 switches of 14 ports.
	"p6-b200.48xlarge":   1067,
	"p6-b300.48xlarge":   1768,
	"p6e-gb200.36xlarge": 1302,
	"trn1.32xlarge":      860,
	"trn1n.32xlarge":     1356,
	"trn2.48xlarge":      1601,
}

// TestSyscallBudget holds topology.Scan to the file-count limit: every
// file it reads costs one openat2(2), one fstat(2) (the type check that
// refuses a named pipe or a device), one read(2) (an attribute fits a
// page, and a short read is the end: no read to see end of file) and one
// close(2); every directory one openat2, two or three getdents64(2) (the
// last sees the end) and one close; every link of bus/pci/devices one
// readlinkat(2), made while the directory is open. Nothing is asked
// twice, and nothing else is asked at all, on every fixture; and the
// calls other than getdents64 stay within syscallBudget.
func TestSyscallBudget(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lines []string
	t.Cleanup(func() {
		slices.Sort(lines)
		t.Logf("system calls of topology.Scan, by fixture:\n%s", strings.Join(lines, "\n"))
	})
	for name, path := range testfixture.Captures(t, "..") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := unpackedRoot(t, path)
			counts, ok := sysfs.CountSyscalls(root)
			if !ok {
				t.Skip("openat2 is missing here: OpenDir fell back to os.Root, not the production path")
			}
			var amu sync.Mutex
			asked := map[string]int{}
			sysfs.AskDirFS(root, func(op, name string) {
				amu.Lock()
				defer amu.Unlock()
				asked[op]++
			})
			_, err := placed.Scan(root, false)
			require.NoError(t, err)
			got := counts()

			files, dirs := asked["open"], asked["readdir"]
			// Besides opens and listings, each placed device's iommu_group
			// link: one lstat (the listing of its directory is not read)
			// and one readlink.
			assert.Zero(t, asked["stat"], "no stat: %v", asked)
			assert.Equal(t, asked["lstat"], asked["readlink"], "each iommu_group link asked once: %v", asked)
			// An open that finds nothing (a Neuron class directory on a
			// GPU machine, a p2p or gdr file of the in-tree driver) closes
			// nothing and lists nothing: a miss, looked for once.
			// An lstat or a readlink opens the entry itself (O_PATH).
			links := asked["lstat"] + asked["readlink"]
			misses := got["openat2"] - got["close"]
			assert.Equal(t, files+dirs+links, got["openat2"], "one open per file, directory, lstat or readlink: %v %v", asked, got)
			assert.True(t, misses >= 0 && misses <= 2+asked["readlink"], "%d opens found nothing", misses)
			assert.True(t, got["read"] <= files && got["read"] >= files-misses, "one read per file: %d for %d files", got["read"], files)
			assert.True(t, got["fstat"] <= files+asked["lstat"] && got["fstat"] >= files-misses, "one fstat per file or lstat: %d for %d files", got["fstat"], files)
			// How many entries one getdents64 returns is the file
			// system's choice, not the Reader's: every listing here fits
			// the Reader's 16 KiB buffer, so a directory takes two calls
			// (entries, then end) on tmpfs, but a file system may end a
			// call early (ext4 returns a hashed directory in hash order,
			// seeded per file system), which costs a third. So the bound
			// is two to three calls a directory, and getdents64 stays out
			// of the budget.
			assert.GreaterOrEqual(t, got["getdents64"], 2*(dirs-misses), "at least two getdents per directory listed")
			assert.LessOrEqual(t, got["getdents64"], 3*dirs, "at most three getdents per directory")
			extra := maps.Clone(got)
			for _, k := range []string{"openat2", "fstat", "read", "close", "getdents64", "readlinkat"} {
				delete(extra, k)
			}
			assert.Empty(t, extra, "other system calls")

			total := 0
			for k, n := range got {
				if k != "getdents64" {
					total += n
				}
			}
			mu.Lock()
			lines = append(lines, fmt.Sprintf("  %-18s %5d = %4d openat2 + %4d fstat + %4d read + %4d close + %3d readlinkat; %3d getdents64 (%d files, %d directories)",
				name, total, got["openat2"], got["fstat"], got["read"], got["close"], got["readlinkat"], got["getdents64"], files, dirs))
			mu.Unlock()
			budget, ok := syscallBudget[name]
			if assert.True(t, ok, "%s has no budget: %d system calls today", name, total) {
				assert.LessOrEqual(t, total, budget, "over budget: %v", got)
			}
		})
	}
}
