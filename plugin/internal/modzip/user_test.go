package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

// userVersion is the library's version in the test's module proxy: a
// pseudo-version naming the zip's content, so that the module cache, which
// keeps a version once downloaded, never serves an earlier tree's zip.
func userVersion(zipped []byte) string {
	sum := sha256.Sum256(zipped)
	return "v0.0.0-20260101000000-" + hex.EncodeToString(sum[:6])
}

// userModule is a program that already uses client-go, as an operator or a
// node agent does, and reads EFA topology with the library.
const userModule = `module example.com/agent

go 1.25

require k8s.io/client-go v0.34.1
`

const userMain = `package main

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

func main() {
	_ = rest.Config{}
	root, err := sysfs.Open(os.Args[1])
	if err != nil {
		panic(err)
	}
	topo, err := topology.Scan(root)
	if err != nil {
		panic(err)
	}
	_, res, _ := efa.Scan(root)
	fmt.Println(len(topo.Of(topology.KindEFA)), len(res.EFAs))
}
`

// TestGoGetKeepsUsersModule is the library's first user's path: a module
// with go 1.25 and k8s.io/client-go v0.34.1 adds efakit with go get (from
// a module proxy on disk that serves the library's zip, packed from this
// work tree; the other modules from the Go module proxy, as any build
// here). After go get and go mod tidy, its go line and client-go are
// unchanged, no toolchain line appears, and it builds and reads a capture.
func TestGoGetKeepsUsersModule(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err)
	root := strings.TrimSpace(string(top))
	zipped, _, err := zipWorkTree(root, "v0.0.0-20260101000000-000000000000")
	require.NoError(t, err)
	zipped, m, err := zipWorkTree(root, userVersion(zipped))
	require.NoError(t, err)

	proxy := t.TempDir()
	dir := filepath.Join(proxy, m.Path, "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	info, err := json.Marshal(map[string]string{"Version": m.Version, "Time": "2026-12-06T00:00:00Z"})
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"list": []byte(m.Version + "\n"), m.Version + ".info": info, m.Version + ".mod": mod, m.Version + ".zip": zipped,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}

	user := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(user, "go.mod"), []byte(userModule), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(user, "main.go"), []byte(userMain), 0o644))
	upstream, err := exec.Command("go", "env", "GOPROXY").Output()
	require.NoError(t, err)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = user
		cmd.Env = append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(proxy)+","+strings.TrimSpace(string(upstream)),
			"GONOSUMDB="+m.Path, "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	parse := func() *modfile.File {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(user, "go.mod"))
		require.NoError(t, err)
		f, err := modfile.Parse("go.mod", data, nil)
		require.NoError(t, err)
		return f
	}
	version := func(f *modfile.File, path string) string {
		for _, r := range f.Require {
			if r.Mod.Path == path {
				return r.Mod.Version
			}
		}
		return ""
	}

	goCmd("get", m.Path+"@"+m.Version)
	goCmd("mod", "tidy")
	f := parse()
	assert.Equal(t, "1.25", f.Go.Version, "the user's go line")
	assert.Nil(t, f.Toolchain, "no toolchain line")
	assert.Equal(t, "v0.34.1", version(f, "k8s.io/client-go"), "the user's client-go")
	assert.Equal(t, m.Version, version(f, m.Path))
	out := goCmd("run", ".", filepath.Join(root, "testdata", "sysfs", "p5.48xlarge.sysfs"))
	assert.Equal(t, "32 32\n", out, "the p5's EFAs, through the topology and efa")
	var reqs []string
	for _, r := range f.Require {
		reqs = append(reqs, r.Mod.String())
	}
	t.Logf("the user's requirements after go get and tidy: %d, client-go %s, go %s", len(reqs), version(f, "k8s.io/client-go"), f.Go.Version)
}
