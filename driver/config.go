package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// The opaque configuration efakit reads from a claim or DeviceClass
// (spec.config[].opaque with driver dra.net): a small versioned object.
//
//	config:
//	- opaque:
//	    driver: dra.net
//	    parameters:
//	      apiVersion: efakit.io/v1alpha1
//	      kind: EFAConfig
//	      env: libfabric
//	  requests: ["efas"]      # optional: every request when left out
const (
	ConfigAPIVersion = "efakit.io/v1alpha1"
	ConfigKind       = "EFAConfig"
)

// EnvMode says which environment variables a request's CDI device sets.
type EnvMode string

// The environment modes.
const (
	// EnvNone sets no variable (the default): the container's uverbs
	// nodes are its EFAs, and libfabric uses every EFA it can open.
	EnvNone EnvMode = "none"
	// EnvLibfabric sets FI_PROVIDER=efa and FI_EFA_IFACE to the request's
	// EFAs, for containers that see more EFAs than they hold (privileged
	// ones). The plugin refuses it where a container takes EFAs from more
	// than this request, since FI_EFA_IFACE would then name a subset.
	EnvLibfabric EnvMode = "libfabric"
)

// EFAConfig is the opaque configuration of efakit's requests.
type EFAConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Env is none (the default) or libfabric; empty leaves the value of an
	// earlier configuration (the class's, for a claim's) as it is.
	Env EnvMode `json:"env,omitempty"`
}

// maxConfigSize bounds the parameters DecodeConfig reads; the API allows
// 10 KiB of opaque parameters.
const maxConfigSize = 10 << 10

// DecodeConfig parses opaque parameters strictly: JSON (the API stores
// opaque parameters as JSON), efakit.io/v1alpha1 EFAConfig, no unknown
// field, nothing after the object, a known env.
func DecodeConfig(raw []byte) (EFAConfig, error) {
	var c EFAConfig
	if len(raw) > maxConfigSize {
		return c, fmt.Errorf("%d bytes of parameters, at most %d", len(raw), maxConfigSize)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return EFAConfig{}, fmt.Errorf("parameters: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return EFAConfig{}, errors.New("parameters: data after the object")
	}
	if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
		return EFAConfig{}, fmt.Errorf("parameters: apiVersion %q kind %q, want %s %s", c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	switch c.Env {
	case "", EnvNone, EnvLibfabric:
	default:
		return EFAConfig{}, fmt.Errorf("parameters: env %q: want %s or %s", c.Env, EnvNone, EnvLibfabric)
	}
	return c, nil
}

// requestEnvs resolves the environment mode of each of the given requests
// from the allocation's configuration for driverName: the class's entries
// first, then the claim's, as the allocator orders them, each applying to
// the requests it names (a request also covers its subrequests) or to all,
// a later value replacing an earlier one. A configuration that does not
// decode is an error naming its source, so a typo never silently turns
// into the default.
func requestEnvs(alloc *resourceapi.AllocationResult, driverName string, requests []string) (map[string]EnvMode, error) {
	out := make(map[string]EnvMode, len(requests))
	for _, r := range requests {
		out[r] = EnvNone
	}
	if alloc == nil {
		return out, nil
	}
	for i, c := range alloc.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driverName {
			continue
		}
		cfg, err := DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			src := "claim"
			if c.Source == resourceapi.AllocationConfigSourceClass {
				src = "class"
			}
			return nil, fmt.Errorf("configuration %d (from the %s) for %s: %w", i, src, driverName, err)
		}
		if cfg.Env == "" {
			continue
		}
		for _, r := range requests {
			if appliesTo(c.Requests, r) {
				out[r] = cfg.Env
			}
		}
	}
	return out, nil
}

// appliesTo reports whether a configuration naming requests (all when
// empty) applies to request r ("req" or "req/sub").
func appliesTo(requests []string, r string) bool {
	if len(requests) == 0 {
		return true
	}
	base, _, _ := strings.Cut(r, "/")
	for _, n := range requests {
		if n == r || n == base {
			return true
		}
	}
	return false
}
