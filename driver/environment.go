package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/cdi"
	"github.com/efakit/efakit/driver/checkpoint"
)

// environment decides the variables of each request's CDI device, by
// request; nil when none sets any, the default.
//
// A request whose configuration says env: libfabric gets FI_PROVIDER=efa
// and FI_EFA_IFACE naming its EFAs. CDI replaces a variable by name, so a
// container that takes EFAs from that request and from any other (another
// request or claim) would end with FI_EFA_IFACE naming only some of its
// EFAs, whichever device the runtime applied last: libfabric would use a
// subset, silently. So the pods the claim is reserved for are read, and
// the claim is refused where one of their containers mixes such a request
// with other EFAs. A variable that a container using the request sets
// itself (env) is left out, the pod spec winning; with envFrom, whose
// names cannot be known here, both are left out.
//
// The same check runs for a claim without the environment when another
// claim (in this call or prepared already) has it, since the mix is wrong
// whichever of the two is prepared second. With no libfabric environment
// anywhere, no pod is read.
func (p *Plugin) environment(ctx context.Context, c *resourceapi.ResourceClaim, claim checkpoint.Claim, call map[string]*resourceapi.ResourceClaim) (map[string][]string, error) {
	envs, err := requestEnvs(c.Status.Allocation, p.cfg.driverName(), p.requestRefs(c))
	if err != nil {
		return nil, err
	}
	on := map[string]bool{}
	for ref, mode := range envs {
		if mode == EnvLibfabric {
			on[baseRequest(ref)] = true
		}
	}
	if len(on) == 0 && !p.envElsewhere(c, call) {
		return nil, nil
	}
	omit, err := p.checkContainers(ctx, c, on, call)
	if err != nil {
		return nil, err
	}
	if len(on) == 0 {
		return nil, nil
	}
	reqs := cdiRequests(claim)
	out := map[string][]string{}
	for base := range on {
		var vars []string
		if !omit[base][cdi.EnvProvider] {
			vars = append(vars, cdi.EnvProvider+"=efa")
		}
		if !omit[base][cdi.EnvIface] {
			vars = append(vars, cdi.EnvIface+"="+cdi.Iface(reqs[base].Devices))
		}
		if len(vars) > 0 {
			out[base] = vars
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// envElsewhere reports whether a prepared claim, or another claim of this
// call, sets the libfabric environment.
func (p *Plugin) envElsewhere(c *resourceapi.ResourceClaim, call map[string]*resourceapi.ResourceClaim) bool {
	for _, pc := range p.state.Claims {
		if len(pc.Env) > 0 {
			return true
		}
	}
	for _, o := range call {
		if o.UID == c.UID || o.Status.Allocation == nil {
			continue
		}
		envs, err := requestEnvs(o.Status.Allocation, p.cfg.driverName(), p.requestRefs(o))
		if err != nil {
			continue // refused when that claim is prepared
		}
		for _, m := range envs {
			if m == EnvLibfabric {
				return true
			}
		}
	}
	return false
}

// requestRefs are the requests of a claim's allocation that hold this
// node's devices of this driver.
func (p *Plugin) requestRefs(c *resourceapi.ResourceClaim) []string {
	var out []string
	if c.Status.Allocation == nil {
		return nil
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == p.cfg.driverName() && r.Pool == p.cfg.NodeName && !slices.Contains(out, r.Request) {
			out = append(out, r.Request)
		}
	}
	return out
}

// source is one CDI device of this driver that a container gets: a
// request of a claim, and whether it sets the libfabric environment.
type source struct {
	claim, request string
	env            bool
}

// sources are a claim's requests on this node, by base request: from the
// checkpoint for a claim prepared already, else from the claim in this
// kubelet call (the one being prepared among them) or the API.
func (p *Plugin) sources(ctx context.Context, namespace, name string, call map[string]*resourceapi.ResourceClaim) ([]source, error) {
	for _, pc := range p.state.Claims {
		if pc.Namespace == namespace && pc.Name == name {
			var out []source
			for _, d := range pc.Devices {
				s := source{claim: name, request: baseRequest(d.Request), env: len(pc.Env[baseRequest(d.Request)]) > 0}
				if !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
			return out, nil
		}
	}
	o, ok := call[namespace+"/"+name]
	if !ok {
		if p.kube == nil {
			return nil, fmt.Errorf("claim %s/%s: no API client to read it", namespace, name)
		}
		var err error
		if o, err = p.kube.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("reading claim %s/%s: %w", namespace, name, err)
		}
	}
	refs := p.requestRefs(o)
	envs, _ := requestEnvs(o.Status.Allocation, p.cfg.driverName(), refs)
	var out []source
	for _, ref := range refs {
		s := source{claim: name, request: baseRequest(ref), env: envs[ref] == EnvLibfabric}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// checkContainers reads the pods the claim is reserved for and refuses a
// container that takes EFAs from several CDI devices of this driver when
// any of them sets the libfabric environment. It returns, by request of
// the claim, the variables a container using that request sets itself.
func (p *Plugin) checkContainers(ctx context.Context, c *resourceapi.ResourceClaim, on map[string]bool, call map[string]*resourceapi.ResourceClaim) (map[string]map[string]bool, error) {
	if p.kube == nil {
		return nil, errors.New("the libfabric environment (env: libfabric) needs the API server, to check the containers that use the claim; the plugin has no client")
	}
	omit := map[string]map[string]bool{}
	var pods int
	for _, ref := range c.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			continue
		}
		pods++
		pod, err := p.kube.CoreV1().Pods(c.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading pod %s/%s to check its containers' EFAs: %w", c.Namespace, ref.Name, err)
		}
		if pod.UID != ref.UID {
			return nil, fmt.Errorf("pod %s/%s has UID %s, the claim is reserved for %s", c.Namespace, ref.Name, pod.UID, ref.UID)
		}
		names := podClaimNames(pod)
		for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			var srcs []source
			mine := map[string]bool{}
			for _, rc := range ctr.Resources.Claims {
				name := names[rc.Name]
				if name == "" {
					continue
				}
				all, err := p.sources(ctx, c.Namespace, name, call)
				if err != nil {
					return nil, err
				}
				for _, s := range all {
					if rc.Request != "" && rc.Request != s.request || slices.Contains(srcs, s) {
						continue
					}
					srcs = append(srcs, s)
					if name == c.Name {
						mine[s.request] = true
					}
				}
			}
			if err := mixed(pod, ctr.Name, srcs); err != nil {
				return nil, err
			}
			for req := range mine {
				if !on[req] {
					continue
				}
				if omit[req] == nil {
					omit[req] = map[string]bool{}
				}
				for _, e := range ctr.Env {
					if e.Name == cdi.EnvProvider || e.Name == cdi.EnvIface {
						omit[req][e.Name] = true
					}
				}
				if len(ctr.EnvFrom) > 0 {
					omit[req][cdi.EnvProvider], omit[req][cdi.EnvIface] = true, true
				}
			}
		}
	}
	if pods == 0 && len(on) > 0 {
		return nil, errors.New("the libfabric environment (env: libfabric) is checked against the pods that use the claim, and it is reserved for none")
	}
	return omit, nil
}

// mixed refuses a container whose EFAs come from several CDI devices when
// one of them sets the libfabric environment.
func mixed(pod *corev1.Pod, ctr string, srcs []source) error {
	if len(srcs) < 2 {
		return nil
	}
	var withEnv, all []string
	for _, s := range srcs {
		n := "claim " + s.claim + " request " + s.request
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
	return fmt.Errorf("container %s of pod %s/%s takes EFAs from %d requests (%s), and %s the libfabric environment (env: libfabric): FI_EFA_IFACE would name only some of its EFAs and libfabric would use a subset; leave env at none (the default) or give the container all its EFAs in one request",
		ctr, pod.Namespace, pod.Name, len(all), strings.Join(all, ", "), which)
}

// podClaimNames maps a pod's claim names (pod.spec.resourceClaims[].name)
// to the ResourceClaims they stand for: the claim named directly, or the
// one made from a template (pod.status.resourceClaimStatuses).
func podClaimNames(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			out[pc.Name] = *pc.ResourceClaimName
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			out[st.Name] = *st.ResourceClaimName
		}
	}
	return out
}
