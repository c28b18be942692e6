package claimenv

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/podresources"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// Call is what one kubelet call's decisions see.
type Call struct {
	// Driver and Pool are this node's: a claim's results of another
	// driver or pool are not this call's concern.
	Driver, Pool string
	// Prepared are the claims prepared already, by UID, as the call sees
	// them (those the call prepared before included).
	Prepared map[string]checkpoint.Claim
	// Claims are the call's claims by namespace/name.
	Claims map[string]*resourceapi.ResourceClaim
	// Pods is the kubelet's answer on the node's pods.
	Pods Pods
}

// Pods is what the kubelet said of the node's pods, read before the
// call's decisions.
type Pods struct {
	// Available: the plugin can ask the kubelet (its PodResources API).
	Available bool
	// Listed: the kubelet was asked, and answered List or Err.
	Listed bool
	List   []podresources.Pod
	Err    error
}

// Users says which pods use a claim, for a message: " (pods a, b)", or
// "" when the kubelet was not asked or does not say.
func (p Pods) Users(namespace, name string) string {
	if !p.Listed || p.Err != nil {
		return ""
	}
	users := podresources.Using(p.List, namespace, name)
	if len(users) == 0 {
		return ""
	}
	return " (pods " + strings.Join(users, ", ") + ")"
}

// Environment decides the variables of each request's CDI device, by base
// request, for claim c whose EFAs are devices (by base request); nil when
// none sets any, the default. A claim whose containers would get the
// libfabric environment wrong is refused with the reason.
func (k *Call) Environment(c *resourceapi.ResourceClaim, devices map[string][]cdi.Device) (map[string][]string, error) {
	on, check, err := k.InPlay(c)
	if err != nil || !check {
		return nil, err
	}
	if err := k.checkContainers(c, len(on) > 0); err != nil {
		return nil, err
	}
	if len(on) == 0 {
		return nil, nil
	}
	out := map[string][]string{}
	for base := range on {
		out[base] = []string{cdi.EnvProvider + "=efa", cdi.EnvIface + "=" + cdi.Iface(devices[base])}
	}
	return out, nil
}

// InPlay says which requests of the claim set the libfabric environment
// (by base request) and whether the containers must be checked: the claim
// sets it, or another claim does (prepared, or in the call).
func (k *Call) InPlay(c *resourceapi.ResourceClaim) (on map[string]bool, check bool, err error) {
	envs, err := requestEnvs(c.Status.Allocation, k.Driver, k.requestRefs(c))
	if err != nil {
		return nil, false, err
	}
	on = map[string]bool{}
	for ref, mode := range envs {
		if mode == resources.EnvLibfabric {
			on[BaseRequest(ref)] = true
		}
	}
	return on, len(on) > 0 || k.elsewhere(c), nil
}

// elsewhere reports whether a prepared claim, or another claim of this
// call, sets the libfabric environment.
func (k *Call) elsewhere(c *resourceapi.ResourceClaim) bool {
	for _, pc := range k.Prepared {
		if len(pc.Env) > 0 {
			return true
		}
	}
	for _, o := range k.Claims {
		if o.UID == c.UID || o.Status.Allocation == nil {
			continue
		}
		envs, err := requestEnvs(o.Status.Allocation, k.Driver, k.requestRefs(o))
		if err != nil {
			continue // refused when that claim is prepared
		}
		for _, m := range envs {
			if m == resources.EnvLibfabric {
				return true
			}
		}
	}
	return false
}

// requestRefs are the requests of a claim's allocation that hold this
// node's devices of this driver.
func (k *Call) requestRefs(c *resourceapi.ResourceClaim) []string {
	var out []string
	if c.Status.Allocation == nil {
		return nil
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == k.Driver && r.Pool == k.Pool && !slices.Contains(out, r.Request) {
			out = append(out, r.Request)
		}
	}
	return out
}

// ExtendedClasses maps each request of c holding this node's devices of
// this driver to its DeviceClass, when c is the claim the scheduler made
// for a pod's extended resources (its annotation says so); nil otherwise.
// The scheduler makes one request per container and extended resource,
// and the kubelet gives each container only its own (the pod's
// status.extendedResourceClaimStatus maps them): so of the requests of
// one class a container gets one, whichever it is. The kubelet's
// PodResources API names the claim for each container that has a request
// of it, not which request.
func (k *Call) ExtendedClasses(c *resourceapi.ResourceClaim) map[string]string {
	if c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return nil
	}
	class := map[string]string{}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			class[r.Name] = r.Exactly.DeviceClassName
		}
	}
	out := map[string]string{}
	for _, ref := range k.requestRefs(c) {
		out[ref] = class[BaseRequest(ref)]
	}
	return out
}

// source is what a container gets of a claim from this driver: a request
// of the claim (one CDI device), or, of the claim the scheduler made for a
// pod's extended resources, the requests of one DeviceClass (the
// container gets one of them, its own), and whether it sets the libfabric
// environment.
type source struct {
	claim, request string
	env            bool
}

// name says what the source is, for a message.
func (s source) name() string {
	if class, ok := strings.CutPrefix(s.request, extendedPrefix); ok {
		return "claim " + s.claim + " (extended resources) request of class " + class
	}
	return "claim " + s.claim + " request " + s.request
}

// extendedPrefix marks a source that stands for the requests of one class
// of an extended-resource claim.
const extendedPrefix = "class "

// sourceOf is the source a request of a claim is to a container: the
// request itself, or its class for an extended-resource claim.
func sourceOf(claim, request string, classes map[string]string, env bool) source {
	if class, ok := classes[request]; ok {
		return source{claim: claim, request: extendedPrefix + class, env: env}
	}
	return source{claim: claim, request: BaseRequest(request), env: env}
}

// sources are a claim's sources on this node: from the prepared claims
// for a claim prepared already, else from the claim in this kubelet call.
// A claim that is neither holds no EFA of this node yet: the kubelet sends
// every claim of a pod that holds this driver's devices in one call, so it
// is another pod's, which is checked when it is prepared.
func (k *Call) sources(namespace, name string) []source {
	var out []source
	add := func(s source) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, pc := range k.Prepared {
		if pc.Namespace == namespace && pc.Name == name {
			for _, d := range pc.Devices {
				add(sourceOf(name, d.Request, pc.ExtendedClasses, len(pc.Env[BaseRequest(d.Request)]) > 0))
			}
			return out
		}
	}
	o, ok := k.Claims[namespace+"/"+name]
	if !ok {
		return nil
	}
	refs := k.requestRefs(o)
	envs, _ := requestEnvs(o.Status.Allocation, k.Driver, refs)
	classes := k.ExtendedClasses(o)
	for _, ref := range refs {
		add(sourceOf(name, ref, classes, envs[ref] == resources.EnvLibfabric))
	}
	return out
}

// checkContainers refuses a container of the pods the claim is reserved
// for that takes EFAs from several CDI devices of this driver when any of
// them sets the libfabric environment, as the kubelet said. A reserved pod
// the kubelet does not know yet is checked when its own claims are
// prepared (a claim that another pod prepared is not prepared again).
// withEnv: the claim itself sets the environment, so it must be reserved
// for a pod.
func (k *Call) checkContainers(c *resourceapi.ResourceClaim, withEnv bool) error {
	reserved := map[string]bool{}
	for _, ref := range c.Status.ReservedFor {
		if ref.APIGroup == "" && ref.Resource == "pods" {
			reserved[ref.Name] = true
		}
	}
	if len(reserved) == 0 {
		if withEnv {
			return errors.New("the libfabric environment (env: libfabric) is checked against the containers that use the claim, and it is reserved for no pod")
		}
		return nil
	}
	if !k.Pods.Available {
		return errors.New("the libfabric environment (env: libfabric) needs the kubelet's PodResources API, to check the containers that use the claim; the plugin has none (--pod-resources-socket)")
	}
	if !k.Pods.Listed {
		return errors.New("the libfabric environment (env: libfabric) is checked against the containers that use the claim, and the kubelet was not asked")
	}
	if k.Pods.Err != nil {
		return fmt.Errorf("the libfabric environment (env: libfabric) is checked against the containers that use the claim: %w", k.Pods.Err)
	}
	for _, pod := range k.Pods.List {
		if pod.Namespace != c.Namespace || !reserved[pod.Name] {
			continue
		}
		for _, ctr := range pod.Containers {
			if !ctr.Uses(c.Namespace, c.Name) {
				continue
			}
			var srcs []source
			for _, cl := range ctr.Claims {
				if cl.Namespace != c.Namespace {
					continue
				}
				for _, s := range k.sources(cl.Namespace, cl.Name) {
					if !slices.Contains(srcs, s) {
						srcs = append(srcs, s)
					}
				}
			}
			if err := mixed(pod, ctr.Name, srcs); err != nil {
				return err
			}
		}
	}
	return nil
}

// mixed refuses a container whose EFAs come from several CDI devices when
// one of them sets the libfabric environment.
func mixed(pod podresources.Pod, ctr string, srcs []source) error {
	if len(srcs) < 2 {
		return nil
	}
	var withEnv, all []string
	for _, s := range srcs {
		n := s.name()
		all = append(all, n)
		if s.env {
			withEnv = append(withEnv, n)
		}
	}
	if len(withEnv) == 0 {
		return nil
	}
	sort.Strings(all)
	sort.Strings(withEnv)
	which := strings.Join(withEnv, ", ") + " sets"
	if len(withEnv) == len(all) {
		which = "each sets"
	}
	return fmt.Errorf("container %s of pod %s/%s takes EFAs from %d requests (%s), and %s the libfabric environment (env: libfabric): FI_EFA_IFACE would name only some of its EFAs and libfabric would use a subset; leave env at none (the default) or give the container all its EFAs in one request of one claim",
		ctr, pod.Namespace, pod.Name, len(all), strings.Join(all, ", "), which)
}

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
	base := BaseRequest(r)
	for _, n := range requests {
		if n == r || n == base {
			return true
		}
	}
	return false
}

// BaseRequest is the request a subrequest ("gpu-efas/4") belongs to; a
// request is its own.
func BaseRequest(r string) string {
	base, _, _ := strings.Cut(r, "/")
	return base
}
