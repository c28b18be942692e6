package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
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

// list is every package of the module with its imports, from go list.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
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
			if ours && !slices.Contains(allowed, dep) {
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
