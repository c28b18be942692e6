// Command image builds the efakit-plugin OCI image without a container
// engine: for linux/amd64 and linux/arm64, the static binaries of
// plugin/cmd/efakit-plugin and plugin/cmd/efakit in one layer on an empty base, run as a
// non-root user; the two images in one OCI image index, written as an OCI
// image layout (push it with any OCI tool: crane, skopeo, oras).
//
//	go run . -o ../../bin/image [-version v0.1.0]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user the image runs as; the Helm chart runs the plugin as
// root with every capability dropped, for the kubelet's host directories.
const nonroot = "65532:65532"

// entrypoint is the plugin, as the chart's DaemonSet runs it.
const entrypoint = "/usr/local/bin/efakit-plugin"

// commands are the binaries of the image, each built from ./cmd/<name> of
// the plugin module (plugin/).
func commands() []string { return []string{"efakit-plugin", "efakit"} }

// platforms are the image's platforms: amd64 for most EFA instances, arm64
// for the Graviton and Grace ones (hpc7g, p6e-gb200). The Dockerfile is
// built for the same list with buildx (TestDockerfileAgrees).
func platforms() []v1.Platform {
	return []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
}

// ldflags strip the symbol tables and stamp the version, as the
// Dockerfile's go build does.
func ldflags(version string) string { return "-s -w -X main.version=" + version }

func main() {
	out := flag.String("o", "../../bin/image", "OCI image layout `directory` to write")
	version := flag.String("version", "dev", "version stamped into the binaries")
	flag.Parse()
	if err := build(*out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// build writes to out an OCI image layout whose index.json names one image
// index, which holds one image per platform, each descriptor with its
// platform (as buildx's OCI exporter does, so crane push and skopeo copy
// take the whole index).
func build(out, version string) error {
	tmp, err := os.MkdirTemp("", "efakit-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var idx v1.ImageIndex = empty.Index
	for _, p := range platforms() {
		img, err := platformImage(filepath.Join(tmp, p.Architecture), p, version)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	l, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := l.AppendIndex(idx); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: wrote %s (index %s)\n", out, d)
	return nil
}

// platformImage builds the binaries for p into dir (static, cross-compiled
// by setting GOARCH: no C toolchain needed) and makes the image of p.
func platformImage(dir string, p v1.Platform, version string) (v1.Image, error) {
	args := []string{"build", "-trimpath", "-ldflags", ldflags(version), "-o", dir + string(filepath.Separator)}
	var files []string
	for _, cmd := range commands() {
		args = append(args, "./cmd/"+cmd)
		files = append(files, filepath.Join(dir, cmd))
	}
	// One go build for both binaries: their packages compile once.
	b := exec.Command("go", args...)
	b.Dir = "../../plugin" // the plugin module
	b.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if o, err := b.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, o)
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	// OCI media types throughout: empty.Image is a Docker manifest, which
	// an OCI index should not hold.
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture, OS: p.OS, Created: v1.Time{Time: time.Unix(0, 0)},
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Entrypoint: []string{entrypoint}, User: nonroot,
			Env:    []string{"PATH=/usr/local/bin"},
			Labels: map[string]string{"org.opencontainers.image.title": "efakit-plugin", "org.opencontainers.image.version": version}},
	})
	if err != nil {
		return nil, err
	}
	// AppendLayers recorded the layer's diff ID in the config it started
	// from; ConfigFile replaced the config, so record it again.
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	diffID, err := layer.DiffID()
	if err != nil {
		return nil, err
	}
	cf.RootFS.DiffIDs = []v1.Hash{diffID}
	return mutate.ConfigFile(img, cf)
}

// tarOf is a layer holding the binaries under /usr/local/bin.
func tarOf(files []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, dir := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: "usr/local/bin/" + filepath.Base(f), Mode: 0o755, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), tw.Close()
}
