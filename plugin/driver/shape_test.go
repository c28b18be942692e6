package driver_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The core's shape, as docs/design.md states it: the root package is the
// kubelet plugin adapter and no more; no struct of the plugin's packages
// holds more than a dozen fields (a bigger one is two concerns); and every
// lock is one the design lists, with the one held across the disk being
// the claim state's.
const (
	maxRootLines    = 1500
	maxStructFields = 12
)

// locks are the mutexes of driver/..., by package and type, with what
// each is held across. Only the claim state's (and the checkpoint
// Store's, which only the claim state's holder calls) is held across a
// file write or fsync.
var locks = map[string]string{
	"driver.Plugin":                               "a scan's sysfs reads: one scan at a time; readers never take it",
	"driver/inventory.Holder":                     "the swap of the next-snapshot channel",
	"driver/claims.State":                         "a kubelet call, a repair: CDI writes and the checkpoint's fsync",
	"driver/checkpoint.Store":                     "a load or a save (fsync): called under driver/claims.State's lock only",
	"driver/publishing.Publisher":                 "its own fields; never an API call",
	"driver/publishing.Slices":                    "the ResourceSlice controller's start and stop, a withdrawal's API calls",
	"driver/owners.Gate":                          "its own fields, after the check",
	"driver/claimstatus.Writer":                   "its queue's wanted entries",
	"driver/metrics.EFA":                          "the exporter's read round",
	"driver/traffic.Tracker":                      "its devices and the counters' last read; its file is written after",
	"driver/podresources/podresourcestest.Server": "a test server's pods",
	"driver/internal/drivertest.Recorder":         "a test target's calls",
}

// TestCoreShape checks the root package's size, the struct sizes and
// the locks of driver/... against the design.
func TestCoreShape(t *testing.T) {
	root, err := os.Getwd()
	require.NoError(t, err)
	rootLines := 0
	found := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(root), path)
		pkg := filepath.ToSlash(filepath.Dir(rel))
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if pkg == "driver" {
			rootLines += strings.Count(string(src), "\n")
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			fields := 0
			for _, fl := range st.Fields.List {
				fields += max(1, len(fl.Names))
				if isMutex(fl.Type) {
					found[pkg+"."+ts.Name.Name] = true
				}
			}
			assert.LessOrEqual(t, fields, maxStructFields, "struct %s.%s (%s) has %d fields", pkg, ts.Name.Name, fset.Position(ts.Pos()), fields)
			return true
		})
		return nil
	})
	require.NoError(t, err)
	assert.LessOrEqual(t, rootLines, maxRootLines, "the root package is %d lines: more than the adapter", rootLines)
	t.Logf("root package: %d lines", rootLines)
	var got, want []string
	for k := range found {
		got = append(got, k)
	}
	for k := range locks {
		want = append(want, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got, "the structs with a lock: a new lock takes its place in the list, with what it is held across")
}

// isMutex tells whether a field's type is sync.Mutex or sync.RWMutex.
func isMutex(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex")
}
