// Command image builds the efakit-plugin OCI image without a container
// engine: the static binaries of cmd/efakit-plugin and cmd/efakit in one
// layer on an empty base, run as a non-root user, written as an OCI image
// layout (push it with any OCI tool: crane, skopeo, oras).
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
)

// nonroot is the user the image runs as; the Helm chart runs the plugin as
// root with every capability dropped, for the kubelet's host directories.
const nonroot = "65532:65532"

func main() {
	out := flag.String("o", "../../bin/image", "OCI image layout `directory` to write")
	version := flag.String("version", "dev", "version stamped into the binaries")
	flag.Parse()
	if err := build(*out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(out, version string) error {
	tmp, err := os.MkdirTemp("", "efakit-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var files []string
	for _, cmd := range []string{"efakit-plugin", "efakit"} {
		bin := filepath.Join(tmp, cmd)
		b := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "./cmd/"+cmd)
		b.Dir = "../.."
		b.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if o, err := b.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", cmd, err, o)
		}
		files = append(files, bin)
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64", OS: "linux", Created: v1.Time{Time: time.Unix(0, 0)},
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Entrypoint: []string{"/usr/local/bin/efakit-plugin"}, User: nonroot,
			Env:    []string{"PATH=/usr/local/bin"},
			Labels: map[string]string{"org.opencontainers.image.title": "efakit-plugin", "org.opencontainers.image.version": version}},
	})
	if err != nil {
		return err
	}
	// AppendLayers recorded the layer's diff ID in the config it started
	// from; ConfigFile replaced the config, so record it again.
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	diffID, err := layer.DiffID()
	if err != nil {
		return err
	}
	cf.RootFS.DiffIDs = []v1.Hash{diffID}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img); err != nil {
		return err
	}
	d, _ := img.Digest()
	fmt.Printf("image: wrote %s (%s)\n", out, d)
	return nil
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
