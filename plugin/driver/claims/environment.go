package claims

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/efakit/efakit/plugin/driver/resources"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/podresources"
)

// environment decides the variables of each request's CDI device, by
// request; nil when none sets any, the default.
//
// A request whose configuration says env: libfabric gets FI_PROVIDER=efa
// and FI_EFA_IFACE naming its EFAs. CDI replaces a variable by name, so a
// container that takes EFAs from that request and from any other (another
// request or claim) would end with FI_EFA_IFACE naming only some of its
// EFAs, whichever device the runtime applied last: libfabric would use a
// subset, silently. So the containers that use the claim are read from
// the kubelet (its PodResources API: which containers of the node's pods
// use which claims; read before the call takes the claim state's lock, see
// callReads), and the claim is refused where one of them mixes such
// a request with other EFAs. The kubelet names the claims a container
// uses, not the requests it takes of them: a container that uses a claim
// is taken to get every request of it that holds this node's EFAs.
//
// The same check runs for a claim without the environment when another
// claim (in this call or prepared already) has it, since the mix is wrong
// whichever of the two is prepared second. With no libfabric environment
// anywhere, the kubelet is not asked.
func (s *State) environment(c *resourceapi.ResourceClaim, claim checkpoint.Claim, call map[string]*resourceapi.ResourceClaim, rd *callReads) (map[string][]string, error) {
	on, check, err := s.envInPlay(c, call)
	if err != nil || !check {
		return nil, err
	}
	if err := s.checkContainers(c, len(on) > 0, call, rd); err != nil {
		return nil, err
	}
	if len(on) == 0 {
		return nil, nil
	}
	reqs := cdiRequests(claim)
	out := map[string][]string{}
	for base := range on {
		out[base] = []string{cdi.EnvProvider + "=efa", cdi.EnvIface + "=" + cdi.Iface(reqs[base].Devices)}
	}
	return out, nil
}

// envInPlay says which requests of the claim set the libfabric
// environment (by base request) and whether the containers must be
// checked: the claim sets it, or another claim does (envElsewhere).
func (s *State) envInPlay(c *resourceapi.ResourceClaim, call map[string]*resourceapi.ResourceClaim) (on map[string]bool, check bool, err error) {
	envs, err := requestEnvs(c.Status.Allocation, s.node.Driver, s.requestRefs(c))
	if err != nil {
		return nil, false, err
	}
	on = map[string]bool{}
	for ref, mode := range envs {
		if mode == resources.EnvLibfabric {
			on[baseRequest(ref)] = true
		}
	}
	return on, len(on) > 0 || s.envElsewhere(c, call), nil
}

// envElsewhere reports whether a prepared claim, or another claim of this
// call, sets the libfabric environment.
func (s *State) envElsewhere(c *resourceapi.ResourceClaim, call map[string]*resourceapi.ResourceClaim) bool {
	for _, pc := range s.cur.Claims {
		if len(pc.Env) > 0 {
			return true
		}
	}
	for _, o := range call {
		if o.UID == c.UID || o.Status.Allocation == nil {
			continue
		}
		envs, err := requestEnvs(o.Status.Allocation, s.node.Driver, s.requestRefs(o))
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
func (s *State) requestRefs(c *resourceapi.ResourceClaim) []string {
	var out []string
	if c.Status.Allocation == nil {
		return nil
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == s.node.Driver && r.Pool == s.node.Name && !slices.Contains(out, r.Request) {
			out = append(out, r.Request)
		}
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

// extendedClasses maps each request of c holding this node's devices of
// this driver to its DeviceClass, when c is the claim the scheduler made
// for a pod's extended resources (its annotation says so); nil otherwise.
// The scheduler makes one request per container and extended resource, and
// the kubelet gives each container only its own (the pod's
// status.extendedResourceClaimStatus maps them): so of the requests of one
// class a container gets one, whichever it is. The kubelet's PodResources
// API names the claim for each container that has a request of it, not
// which request.
func (s *State) extendedClasses(c *resourceapi.ResourceClaim) map[string]string {
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
	for _, ref := range s.requestRefs(c) {
		out[ref] = class[baseRequest(ref)]
	}
	return out
}

// sourceOf is the source a request of a claim is to a container: the
// request itself, or its class for an extended-resource claim.
func sourceOf(claim, request string, classes map[string]string, env bool) source {
	if class, ok := classes[request]; ok {
		return source{claim: claim, request: extendedPrefix + class, env: env}
	}
	return source{claim: claim, request: baseRequest(request), env: env}
}

// sources are a claim's sources on this node: from the checkpoint for a
// claim prepared already, else from the claim in this kubelet call. A
// claim that is neither holds no EFA of this node yet: the kubelet sends
// every claim of a pod that holds this driver's devices in one call, so it
// is another pod's, which is checked when it is prepared.
func (s *State) sources(namespace, name string, call map[string]*resourceapi.ResourceClaim) []source {
	var out []source
	add := func(s source) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, pc := range s.cur.Claims {
		if pc.Namespace == namespace && pc.Name == name {
			for _, d := range pc.Devices {
				add(sourceOf(name, d.Request, pc.ExtendedClasses, len(pc.Env[baseRequest(d.Request)]) > 0))
			}
			return out
		}
	}
	o, ok := call[namespace+"/"+name]
	if !ok {
		return nil
	}
	refs := s.requestRefs(o)
	envs, _ := requestEnvs(o.Status.Allocation, s.node.Driver, refs)
	classes := s.extendedClasses(o)
	for _, ref := range refs {
		add(sourceOf(name, ref, classes, envs[ref] == resources.EnvLibfabric))
	}
	return out
}

// checkContainers asks the kubelet which containers of the pods the claim
// is reserved for use it, and refuses one that takes EFAs from several CDI
// devices of this driver when any of them sets the libfabric environment.
// A reserved pod the kubelet does not know yet is checked when its own
// claims are prepared (a claim that another pod prepared is not prepared
// again). withEnv: the claim itself sets the environment, so it must be
// reserved for a pod.
func (s *State) checkContainers(c *resourceapi.ResourceClaim, withEnv bool, call map[string]*resourceapi.ResourceClaim, rd *callReads) error {
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
	if s.deps.Pods == nil {
		return errors.New("the libfabric environment (env: libfabric) needs the kubelet's PodResources API, to check the containers that use the claim; the plugin has none (--pod-resources-socket)")
	}
	if !rd.listed {
		return errors.New("the libfabric environment (env: libfabric) is checked against the containers that use the claim, and the kubelet was not asked")
	}
	pods, err := rd.pods, rd.podsErr
	if err != nil {
		return fmt.Errorf("the libfabric environment (env: libfabric) is checked against the containers that use the claim: %w", err)
	}
	for _, pod := range pods {
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
				for _, s := range s.sources(cl.Namespace, cl.Name, call) {
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
