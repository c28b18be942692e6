package drivertest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/sysfs"
)

// Edit returns the capture at path with f applied to each entry (false
// drops it).
func Edit(t testing.TB, path string, f func(e *sysfs.Entry) bool) *sysfs.MemFS {
	t.Helper()
	r, err := sysfs.OpenCapture(path)
	require.NoError(t, err)
	var es []sysfs.Entry
	for _, e := range r.ReadLinkFS.(*sysfs.MemFS).Entries() {
		if f(&e) {
			es = append(es, e)
		}
	}
	m, err := sysfs.NewMemFS(es)
	require.NoError(t, err)
	return m
}

var uverbsName = regexp.MustCompile(`\buverbs(\d+)\b`)

// Renumbered is the capture at path after an efa or ib_uverbs module
// reload that gave the uverbs devices new numbers: uverbs<a> becomes
// uverbs<to[a]>, with its character device number (231:192+n),
// everywhere sysfs shows it.
func Renumbered(t testing.TB, path string, to map[int]int) *sysfs.MemFS {
	t.Helper()
	re := func(s string) string {
		return uverbsName.ReplaceAllStringFunc(s, func(m string) string {
			var n int
			fmt.Sscanf(m, "uverbs%d", &n)
			if v, ok := to[n]; ok {
				return fmt.Sprintf("uverbs%d", v)
			}
			return m
		})
	}
	return Edit(t, path, func(e *sysfs.Entry) bool {
		old := e.Path
		e.Path, e.Target = re(e.Path), re(e.Target)
		if m := uverbsName.FindStringSubmatch(old); m != nil && filepath.Base(old) == "dev" {
			var n int
			fmt.Sscanf(m[1], "%d", &n)
			if v, ok := to[n]; ok {
				e.Data = []byte(fmt.Sprintf("231:%d\n", 192+v))
			}
		}
		return true
	})
}
