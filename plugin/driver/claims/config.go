package claims

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// The opaque configuration efakit reads from a claim or DeviceClass is
// resources.EFAConfig; here is how an allocation's configurations resolve
// into each request's environment.

// requestEnvs resolves the environment mode of each of the given requests
// from the allocation's configuration for driverName: the class's entries
// first, then the claim's, as the allocator orders them, each applying to
// the requests it names (a request also covers its subrequests) or to all,
// a later value replacing an earlier one. A configuration that does not
// decode is an error naming its source, so a typo never silently turns
// into the default.
func requestEnvs(alloc *resourceapi.AllocationResult, driverName string, requests []string) (map[string]resources.EnvMode, error) {
	out := make(map[string]resources.EnvMode, len(requests))
	for _, r := range requests {
		out[r] = resources.EnvNone
	}
	if alloc == nil {
		return out, nil
	}
	for i, c := range alloc.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driverName {
			continue
		}
		cfg, err := resources.DecodeConfig(c.Opaque.Parameters.Raw)
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
