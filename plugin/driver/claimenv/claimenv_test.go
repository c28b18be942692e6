package claimenv

import (
	"testing"

	"github.com/efakit/efakit/plugin/driver/resources"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func opaque(src resourceapi.AllocationConfigSource, driver, params string, reqs ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: src, Requests: reqs, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
}

// TestRequestEnvs: the class's configuration first, then the claim's, each
// for the requests it names (a request covers its subrequests), a later
// value replacing an earlier one; other drivers' configurations ignored.
func TestRequestEnvs(t *testing.T) {
	t.Parallel()
	lib := `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"libfabric"}`
	none := `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig","env":"none"}`
	empty := `{"apiVersion":"efakit.io/v1alpha1","kind":"EFAConfig"}`
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Config: []resourceapi.DeviceAllocationConfiguration{
		opaque(resourceapi.AllocationConfigSourceClass, "dra.net", lib),
		opaque(resourceapi.AllocationConfigSourceClass, "gpu.nvidia.com", `not even json`),
		opaque(resourceapi.AllocationConfigSourceClaim, "dra.net", none, "b"),
		opaque(resourceapi.AllocationConfigSourceClaim, "dra.net", empty, "a"),
		opaque(resourceapi.AllocationConfigSourceClaim, "dra.net", none, "c/small"),
	}}}
	got, err := requestEnvs(alloc, "dra.net", []string{"a", "b", "b/large", "c/small", "c/large", "d"})
	require.NoError(t, err)
	assert.Equal(t, map[string]resources.EnvMode{
		"a": resources.EnvLibfabric, "b": resources.EnvNone, "b/large": resources.EnvNone, "c/small": resources.EnvNone, "c/large": resources.EnvLibfabric, "d": resources.EnvLibfabric,
	}, got)

	got, err = requestEnvs(nil, "dra.net", []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, map[string]resources.EnvMode{"a": resources.EnvNone}, got, "the default")

	alloc.Devices.Config = append(alloc.Devices.Config, opaque(resourceapi.AllocationConfigSourceClass, "dra.net", `{"kind":"EFAConfig"}`))
	_, err = requestEnvs(alloc, "dra.net", []string{"a"})
	assert.ErrorContains(t, err, "configuration 5 (from the class) for dra.net: parameters: apiVersion")
}
