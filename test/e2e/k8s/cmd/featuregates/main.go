// Command featuregates prints, as JSON, the versioned specs of the
// Kubernetes feature gates named as arguments, from the code of the
// Kubernetes this module pins: at which version each gate became alpha,
// beta or GA, and its default from then. test/e2e's TestVersionsTable
// checks docs/versions.md against it.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/kubernetes/pkg/features" // registers the gates with their versioned defaults
)

// spec is one step of a gate's life.
type spec struct {
	Version    string `json:"version"`
	Default    bool   `json:"default"`
	PreRelease string `json:"preRelease"`
}

func main() {
	all := utilfeature.DefaultMutableFeatureGate.GetAllVersioned()
	out := map[string][]spec{}
	for _, name := range os.Args[1:] {
		specs, ok := all[featuregate.Feature(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "no feature gate %s\n", name)
			os.Exit(1)
		}
		for _, s := range specs {
			out[name] = append(out[name], spec{Version: fmt.Sprintf("%d.%d", s.Version.Major(), s.Version.Minor()), Default: s.Default, PreRelease: string(s.PreRelease)})
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
