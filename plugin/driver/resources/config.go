package resources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
