package cdi

// Making a Writer; reading, checking and removing a claim's spec file.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// NewWriter returns a Writer of specs in dir (the runtime's CDI directory,
// /var/run/cdi) whose vendor is the DRA driver name. dir must be absolute,
// so that the file a runtime reads does not depend on the plugin's working
// directory, and the driver name must be a valid CDI vendor name.
func NewWriter(dir, driverName string) (*Writer, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("cdi: spec directory %q is not an absolute path", dir)
	}
	if err := parser.ValidateVendorName(driverName); err != nil {
		return nil, fmt.Errorf("cdi: driver name %q is not a CDI vendor name: %w", driverName, err)
	}
	if err := parser.ValidateClassName(Class); err != nil {
		return nil, fmt.Errorf("cdi: class %q: %w", Class, err)
	}
	return &Writer{dir: filepath.Clean(dir), vendor: driverName}, nil
}

// Dir is the spec directory.
func (w *Writer) Dir() string { return w.dir }

// Kind is the CDI kind of the Writer's specs, "<driver name>/efa".
func (w *Writer) Kind() string { return w.vendor + "/" + Class }

// Remove deletes the claim's spec. A missing spec is no error, so that
// Unprepare can be retried and can run after a reboot wiped the directory.
func (w *Writer) Remove(claimUID string) error {
	path, err := w.SpecPath(claimUID)
	if err != nil {
		return err
	}
	// The directory is not synced: a removal lost to a crash leaves a
	// spec no pod refers to, which the next Remove deletes.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cdi: claim %s: removing spec: %w", claimUID, err)
	}
	return nil
}

// Exists reports whether the claim's spec file is in the spec directory.
// After a restart the plugin uses it to write again the specs of
// checkpointed claims that a tmpfs wipe lost.
func (w *Writer) Exists(claimUID string) (bool, error) {
	path, err := w.SpecPath(claimUID)
	if err != nil {
		return false, err
	}
	return regularFile(claimUID, path)
}

// Holds reports whether the claim's spec file is in the spec directory
// (exists) and holds every CDI device Write would write for requests, as
// Write would write it (holds): not so after a renumbering, or for a spec
// an earlier efakit wrote without some of them. Devices the file has
// besides (a later efakit's) are no difference.
func (w *Writer) Holds(claimUID string, requests map[string]Request) (exists, holds bool, err error) {
	path, err := w.SpecPath(claimUID)
	if err != nil {
		return false, false, err
	}
	if exists, err = regularFile(claimUID, path); err != nil || !exists {
		return exists, false, err
	}
	want, _, err := w.spec(claimUID, requests)
	if err != nil {
		return true, false, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return true, false, fmt.Errorf("cdi: claim %s: reading spec: %w", claimUID, err)
	}
	var got specs.Spec
	if json.Unmarshal(data, &got) != nil || got.Kind != want.Kind {
		return true, false, nil
	}
	for _, d := range want.Devices {
		i := slices.IndexFunc(got.Devices, func(g specs.Device) bool { return g.Name == d.Name })
		if i < 0 || !reflect.DeepEqual(got.Devices[i].ContainerEdits, d.ContainerEdits) {
			return true, false, nil
		}
	}
	return true, true, nil
}

// Load reads the claim's spec back and validates it with the CDI library,
// as a runtime would: a parse with unknown fields refused, names, version
// against content, device edits; and its kind must be the Writer's. A
// missing spec gives an error that wraps fs.ErrNotExist.
func (w *Writer) Load(claimUID string) (*specs.Spec, error) {
	path, err := w.SpecPath(claimUID)
	if err != nil {
		return nil, err
	}
	spec, err := cdiapi.ReadSpec(path, 0)
	if err != nil {
		// The library's error names the file.
		return nil, fmt.Errorf("cdi: claim %s: loading spec: %w", claimUID, err)
	}
	if spec.GetVendor() != w.vendor || spec.GetClass() != Class {
		return nil, fmt.Errorf("cdi: claim %s: spec %s has kind %q, want %q", claimUID, path, spec.Kind, w.Kind())
	}
	return spec.Spec, nil
}
