package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/efakit/efakit/"

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// list is every package of the library's module and of the plugin's, with
// its imports, from go list in each.
func list(t *testing.T) []pkg {
	t.Helper()
	var pkgs []pkg
	for _, dir := range []string{"../..", "../../plugin"} {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil && dir != "../.." {
			continue // the library alone, as its module zip holds it
		}
		cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
		cmd.Dir = dir
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list in %s: %v\n%s", dir, err, ee.Stderr)
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		dec := json.NewDecoder(strings.NewReader(string(out)))
		for {
			var p pkg
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			pkgs = append(pkgs, p)
			n++
		}
		if n < 10 {
			t.Fatalf("go list found %d packages in %s", n, dir)
		}
	}
	return pkgs
}

// TestLayers: every package imports only the efakit packages its layer
// allows (tests may import more: fixtures, the packages above for end to
// end checks), and the library imports no cluster client.
func TestLayers(t *testing.T) {
	for _, p := range list(t) {
		name := strings.TrimPrefix(p.ImportPath, module)
		allowed, ok := Allowed[name]
		if !ok {
			t.Errorf("%s is not in layers.Allowed: give it its place in the layers (docs/design.md)", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if ours && !slices.Contains(allowed, dep) && !slices.Contains(Everywhere, dep) {
				t.Errorf("%s imports %s, which its layer does not allow (docs/design.md)", name, dep)
			}
			if slices.Contains(NoKubernetes, name) && strings.HasPrefix(imp, "k8s.io/") {
				t.Errorf("%s imports %s: the hardware library imports nothing of Kubernetes", name, imp)
			}
			if slices.Contains(NoCluster, name) && (strings.HasPrefix(imp, "k8s.io/client-go") ||
				strings.HasPrefix(imp, "google.golang.org/grpc") || strings.HasPrefix(imp, "github.com/prometheus/")) {
				t.Errorf("%s imports %s: it reaches no cluster and serves nothing", name, imp)
			}
		}
	}
}

// TestAllowedNamesPackages: every package the rule names exists, so that
// a moved package cannot leave a rule that checks nothing.
func TestAllowedNamesPackages(t *testing.T) {
	have := map[string]bool{}
	for _, p := range list(t) {
		have[strings.TrimPrefix(p.ImportPath, module)] = true
	}
	for name, deps := range Allowed {
		if !have[name] {
			t.Errorf("layers.Allowed names %s, which is not a package", name)
		}
		for _, d := range deps {
			if !have[d] {
				t.Errorf("layers.Allowed[%s] names %s, which is not a package", name, d)
			}
		}
	}
}

// TestWhatEachPackageLinks: importing a reader links neither netlink (the
// RDMA namespace mode is rdmans's alone) nor net/http (pcidb's, for names,
// is internal/pciids's alone), whatever the packages in between import.
func TestWhatEachPackageLinks(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"sysfs", "pcie", "efa", "efa/health", "host", "neuron", "topology", "gpudirect", "snapshot"} {
		cmd := exec.Command("go", "list", "-deps", "./"+p)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", p, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps ./%s: %d packages", p, len(deps))
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/vishvananda/netlink") || d == "net/http" || strings.HasPrefix(d, "github.com/jaypipes/") {
				t.Errorf("%s links %s", p, d)
			}
		}
	}
	// The packages that are for it do link it: the check can fail.
	out, err := exec.Command("go", "list", "-deps", "../../rdmans").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(out)), "github.com/vishvananda/netlink") {
		t.Error("rdmans does not link netlink: go list -deps answers something else")
	}
}
