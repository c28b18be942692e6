// Package harness runs what test/e2e's tests and bench/cluster's
// measurements run: etcd and the real kube-apiserver, kube-scheduler and
// kube-controller-manager of test/e2e/k8s on loopback (StartControlPlane,
// APIServer), efakit's plugin against them on a fixture with a kubelet
// stand-in (NewE2ENode), a real node (StartRealNode: a kubelet,
// containerd and runc on this machine, in a mount namespace of their own)
// with the plugin as the chart runs it, bursts of pods on that node, the
// Helm chart rendered, and the components' /metrics parsed. It builds the
// binaries it runs (BuildBinaries) from test/e2e's modules, wherever the
// test binary that imports it runs.
package harness

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// Root is the repository's root: the nearest directory above the working
// directory (a test's package directory) whose go.mod is efakit's, or
// "../.." where there is none.
var Root = findRoot()

// e2eDir is test/e2e, the module whose go.mod pins helm and whose
// directories hold the modules and commands the harness builds.
var e2eDir = filepath.Join(Root, "test", "e2e")

func findRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("..", "..")
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && modulePath(b) == "github.com/efakit/efakit" {
			return d
		}
		if filepath.Dir(d) == d {
			return filepath.Join("..", "..")
		}
	}
}

// modulePath is the module line of a go.mod.
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

// Fixture is the path of a synthetic sysfs capture of testdata/sysfs by
// its instance type ("p5.48xlarge").
func Fixture(instanceType string) string {
	return filepath.Join(Root, "testdata", "sysfs", instanceType+".sysfs")
}
