package main

import (
	"archive/tar"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// arch is what the test knows of each GOARCH of the image: the ELF machine
// its binaries must have and the name of qemu-user's emulator for it.
var arch = map[string]struct {
	machine elf.Machine
	qemu    string
}{
	"amd64": {elf.EM_X86_64, "x86_64"},
	"arm64": {elf.EM_AARCH64, "aarch64"},
}

// TestImage builds the image and reads the OCI layout back: one image
// index holding exactly linux/amd64 and linux/arm64, each descriptor with
// its platform; each image's config (platform, non-root user, entrypoint,
// labels) and its one layer's binaries, which must be static ELF files of
// the platform's machine. The binaries of this machine's architecture run;
// the other's run under qemu-user when it is installed (make image-check
// installs it).
func TestImage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image")
	require.NoError(t, build(out, "test"))
	p, err := layout.FromPath(out)
	require.NoError(t, err)
	top, err := p.ImageIndex()
	require.NoError(t, err)
	tm, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, tm.Manifests, 1, "index.json names one image index")
	require.Equal(t, types.OCIImageIndex, tm.Manifests[0].MediaType)
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	var got []string
	for _, d := range m.Manifests {
		require.NotNil(t, d.Platform, "descriptor %s has no platform", d.Digest)
		got = append(got, d.Platform.String())
	}
	require.ElementsMatch(t, []string{"linux/amd64", "linux/arm64"}, got)
	for _, d := range m.Manifests {
		t.Run(d.Platform.String(), func(t *testing.T) { checkPlatformImage(t, idx, d) })
	}
}

func checkPlatformImage(t *testing.T, idx v1.ImageIndex, d v1.Descriptor) {
	a, ok := arch[d.Platform.Architecture]
	require.True(t, ok, d.Platform.Architecture)
	assert.Equal(t, types.OCIManifestSchema1, d.MediaType)
	img, err := idx.Image(d.Digest)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, d.Platform.OS, cf.OS)
	assert.Equal(t, d.Platform.Architecture, cf.Architecture)
	assert.Equal(t, "65532:65532", cf.Config.User, "non-root")
	assert.Equal(t, []string{"/usr/local/bin/efakit-plugin"}, cf.Config.Entrypoint)
	assert.Equal(t, map[string]string{"org.opencontainers.image.title": "efakit-plugin", "org.opencontainers.image.version": "test"}, cf.Config.Labels)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1, "one layer on an empty base")
	require.Len(t, cf.RootFS.DiffIDs, 1)
	dir := unpackLayer(t, layers[0])
	bins := map[string][]string{"efakit-plugin": {"--version"}, "efakit": {"version"}}
	for name := range bins {
		f, err := elf.Open(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Equal(t, a.machine, f.Machine, "%s: ELF machine", name)
		for _, prog := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, prog.Type, "%s: has an interpreter, not static", name)
		}
		libs, err := f.ImportedLibraries()
		require.NoError(t, err)
		assert.Empty(t, libs, "%s: links shared libraries", name)
		require.NoError(t, f.Close())
	}
	var emulator []string
	if d.Platform.Architecture != runtime.GOARCH {
		q := lookQemu(a.qemu)
		if q == "" {
			t.Skipf("ELF checked only: no qemu-%[1]s-static or qemu-%[1]s in PATH to run the %s binaries (make image-check installs Debian's qemu-user-static)", a.qemu, d.Platform)
		}
		emulator = []string{q}
	}
	for name, args := range bins {
		cmd := append(append(emulator, filepath.Join(dir, name)), args...)
		v, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", cmd, v)
		assert.Contains(t, string(v), name+" test")
	}
}

// lookQemu finds qemu-user's emulator for a machine: Debian's
// qemu-user-static names it qemu-<machine>-static, qemu-user
// qemu-<machine>.
func lookQemu(machine string) string {
	for _, n := range []string{"qemu-" + machine + "-static", "qemu-" + machine} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// unpackLayer writes the layer's regular files, by base name, to a new
// directory, and checks they are the image's binaries under /usr/local/bin.
func unpackLayer(t *testing.T, l v1.Layer) string {
	rc, err := l.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	dir := t.TempDir()
	var found []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		found = append(found, h.Name)
		w, err := os.OpenFile(filepath.Join(dir, filepath.Base(h.Name)), os.O_CREATE|os.O_WRONLY, 0o755)
		require.NoError(t, err)
		_, err = io.Copy(w, tr)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	assert.ElementsMatch(t, []string{"usr/local/bin/efakit-plugin", "usr/local/bin/efakit"}, found)
	return dir
}

// TestDockerfileAgrees checks that the Dockerfile, which cannot be built
// here (no engine), builds what tools/image builds: the same binaries with
// the same flags, cross-compiled in a build stage on the builder's platform
// for buildx's target, the same user and entrypoint, and that its usage
// line names the same platforms.
func TestDockerfileAgrees(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var from, run, user, entry, copyBins, buildx string
	var args []string
	for _, line := range strings.Split(text, "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch word {
		case "FROM":
			if strings.HasSuffix(rest, " AS build") {
				from = rest
			}
		case "ARG":
			args = append(args, strings.Fields(rest)...)
		case "RUN":
			if strings.Contains(rest, "go build") {
				run = rest
			}
		case "USER":
			user = rest
		case "ENTRYPOINT":
			entry = rest
		case "COPY":
			if strings.HasPrefix(rest, "--from=build ") {
				copyBins = rest
			}
		case "#":
			if _, after, ok := strings.Cut(rest, "buildx build --platform "); ok && len(strings.Fields(after)) > 0 {
				buildx = strings.Fields(after)[0]
			}
		}
	}
	var want []string
	for _, p := range platforms() {
		want = append(want, p.String())
	}
	assert.Equal(t, strings.Join(want, ","), buildx, "the platforms of the usage line's buildx build")
	assert.True(t, strings.HasPrefix(from, "--platform=$BUILDPLATFORM "), "build stage on the builder's platform: FROM %s", from)
	assert.Contains(t, args, "TARGETOS")
	assert.Contains(t, args, "TARGETARCH")
	for _, want := range []string{"CGO_ENABLED=0 ", "GOOS=${TARGETOS} ", "GOARCH=${TARGETARCH} ", " -trimpath ", ` -ldflags "` + ldflags("${VERSION}") + `" `} {
		assert.Contains(t, run, want)
	}
	for _, c := range commands() {
		assert.Contains(t, run+" ", " ./cmd/"+c+" ")
		assert.Contains(t, copyBins, " /out/"+c+" ")
	}
	assert.True(t, strings.HasSuffix(copyBins, " /usr/local/bin/"), copyBins)
	assert.Equal(t, nonroot, user)
	assert.Equal(t, `["`+entrypoint+`"]`, entry)
}
