package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/efakit/efakit/internal/atomicfile"
)

// MetadataClass is the CDI class of the device-metadata specs that the
// kubelet plugin helper (k8s.io/dynamic-resource-allocation/kubeletplugin)
// writes beside the Writer's: "<driver>/metadata=<claim UID>_<request>"
// bind-mounts a request's metadata file into the container.
const MetadataClass = "metadata"

// MetadataSpecPath is the path of the helper's metadata spec of one request,
// "<dir>/<driver>_metadata_<claim UID>_<request>.json": the name the helper
// gives it and globs for when it removes a claim's specs, so a spec written
// here again is removed with the others.
func (w *Writer) MetadataSpecPath(claimUID, request string) (string, error) {
	if err := ValidateClaimUID(claimUID); err != nil {
		return "", err
	}
	if err := checkRequestName(request); err != nil {
		return "", err
	}
	return filepath.Join(w.dir, w.vendor+"_"+MetadataClass+"_"+claimUID+"_"+request+".json"), nil
}

// checkRequestName checks that a request name (a DNS label in the API) can
// be part of a file and CDI device name.
func checkRequestName(r string) error {
	if r == "" || len(r) > 63 {
		return fmt.Errorf("cdi: request name %q: empty or longer than 63", r)
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("cdi: request name %q: invalid character %q", r, c)
		}
	}
	return nil
}

// WriteMetadata writes the metadata spec of one request of a claim, as the
// helper does when it prepares the claim: one device, "<claim UID>_<request>",
// that bind-mounts hostPath read-only at containerPath. The plugin calls it
// after a restart for a prepared claim whose spec a wiped CDI directory
// lost: the kubelet does not prepare such a claim again, and a container
// restart would otherwise fail with "unresolvable CDI devices". It returns
// the device's fully qualified ID.
func (w *Writer) WriteMetadata(claimUID, request, hostPath, containerPath string) (string, error) {
	path, err := w.MetadataSpecPath(claimUID, request)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(hostPath) || !filepath.IsAbs(containerPath) {
		return "", fmt.Errorf("cdi: claim %s: metadata paths %q and %q must be absolute", claimUID, hostPath, containerPath)
	}
	name := claimUID + "_" + request
	spec := &specs.Spec{
		Kind: w.vendor + "/" + MetadataClass,
		Devices: []specs.Device{{
			Name: name,
			ContainerEdits: specs.ContainerEdits{Mounts: []*specs.Mount{{
				HostPath: hostPath, ContainerPath: containerPath, Options: []string{"ro", "bind"},
			}}},
		}},
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("cdi: claim %s: metadata spec version: %w", claimUID, err)
	}
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("cdi: claim %s: encoding metadata spec: %w", claimUID, err)
	}
	err = atomicfile.Write(path, data, w.options(func(tmp string) error {
		if _, err := cdiapi.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("invalid spec: %w", err)
		}
		return nil
	}))
	if err != nil {
		return "", fmt.Errorf("cdi: claim %s: writing metadata spec %s: %w", claimUID, path, err)
	}
	return w.vendor + "/" + MetadataClass + "=" + name, nil
}

// MetadataExists reports whether the metadata spec of a request is there.
func (w *Writer) MetadataExists(claimUID, request string) (bool, error) {
	path, err := w.MetadataSpecPath(claimUID, request)
	if err != nil {
		return false, err
	}
	return regularFile(claimUID, path)
}

func regularFile(claimUID, path string) (bool, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("cdi: claim %s: %w", claimUID, err)
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("cdi: claim %s: spec %s is not a regular file (%s)", claimUID, path, fi.Mode().Type())
	}
	return true, nil
}

// Files are the files of the Writer's driver in the spec directory.
type Files struct {
	// Specs are the claim UIDs of the Writer's own specs.
	Specs []string
	// Metadata are the helper's metadata specs, file names by claim UID.
	Metadata map[string][]string
	// Temp are temporary files that an interrupted write left behind
	// (".<driver>-efa_<uid>.json.<random>.tmp" and the metadata
	// equivalents); file names.
	Temp []string
}

// List lists the driver's files in the spec directory, sorted; a missing
// directory holds none. Other drivers' files are not looked at.
func (w *Writer) List() (Files, error) {
	f := Files{Metadata: map[string][]string{}}
	ents, err := os.ReadDir(w.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("cdi: listing %s: %w", w.dir, err)
	}
	own := cdiapi.GenerateTransientSpecName(w.vendor, Class, "")
	meta := w.vendor + "_" + MetadataClass + "_"
	for _, e := range ents {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, "."+own) || strings.HasPrefix(n, "."+meta):
			if strings.HasSuffix(n, ".tmp") {
				f.Temp = append(f.Temp, n)
			}
		case strings.HasPrefix(n, own) && strings.HasSuffix(n, ".json"):
			uid := strings.TrimSuffix(strings.TrimPrefix(n, own), ".json")
			if ValidateClaimUID(uid) == nil {
				f.Specs = append(f.Specs, uid)
			}
		case strings.HasPrefix(n, meta) && strings.HasSuffix(n, ".json"):
			rest := strings.TrimSuffix(strings.TrimPrefix(n, meta), ".json")
			// A UID holds no '_'; the request name follows the first.
			uid, _, ok := strings.Cut(rest, "_")
			if ok && ValidateClaimUID(uid) == nil {
				f.Metadata[uid] = append(f.Metadata[uid], n)
			}
		}
	}
	slices.Sort(f.Specs)
	slices.Sort(f.Temp)
	return f, nil
}

// RemoveName removes one file of the driver's, by the name List gave; a
// missing file is no error.
func (w *Writer) RemoveName(name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("cdi: %q is not a file name", name)
	}
	if err := os.Remove(filepath.Join(w.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cdi: %w", err)
	}
	return nil
}
