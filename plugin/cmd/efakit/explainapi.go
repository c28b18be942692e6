package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// explainTimeout bounds the whole run: the lists of a large cluster's
// nodes, slices and claims are its longest calls.
const explainTimeout = 2 * time.Minute

const explainHelp = `Says why a pod with EFA claims is pending: the nodes it may run on (its node
selector and required node affinity), grouped by the mode their efakit devices
show (single EFAs, EFA groups, or both), and for each group which of the
claims' EFA requests it cannot serve: a kind of device it does not publish
(a single EFA asked of a node group in exclusive mode), more devices than it
has, or devices other claims hold. It checks efakit's classes by kind and
count; the requests' own selectors, the claims' constraints, other drivers'
devices, taints and resources stay the scheduler's, whose message it prints.
It reads the API server with the kubeconfig (or in a cluster, the pod's
service account): the pod, its claims or their templates, DeviceClasses,
Nodes, the driver's ResourceSlices and every ResourceClaim.
Exit code 0 when the pod is bound or some node it may run on can serve its
EFA requests, 1 when none can (or the API could not be read), 2 on a usage
error.
`

func cmdExplain(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("explain")
	podRef := fl.String("pod", "", "the pod, `namespace/name`")
	driverName := fl.String("driver-name", resources.DefaultDriverName, "DRA driver `name`")
	kubeconfig := fl.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig `file` (default $KUBECONFIG; in-cluster configuration when empty)")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	ns, name, ok := strings.Cut(*podRef, "/")
	if !ok || ns == "" || name == "" {
		fmt.Fprintf(stderr, "efakit explain: --pod wants namespace/name, not %q\n", *podRef)
		writeCommandUsage(stderr, fl)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), explainTimeout)
	defer cancel()
	client, why := apiClient(ctx, *kubeconfig, os.Getenv, serviceAccountDir)
	if client == nil {
		fmt.Fprintf(stderr, "efakit explain: %s\n", why)
		return 1
	}
	e, err := explainPod(ctx, client.(*kubeAPI), ns, name, *driverName)
	if err != nil {
		fmt.Fprintf(stderr, "efakit explain: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, strings.Join(e.lines, "\n"))
	if !e.served {
		return 1
	}
	return 0
}

// explainPod reads what explain needs from the API server.
func explainPod(ctx context.Context, a *kubeAPI, ns, name, driver string) (explanation, error) {
	var pod corev1.Pod
	if err := a.get(ctx, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), nil, &pod); err != nil {
		return explanation{}, err
	}
	if pod.Spec.NodeName != "" {
		return explain(&pod, nil, nil, nil), nil
	}
	claims, err := podClaims(ctx, a, &pod, driver)
	if err != nil {
		return explanation{}, err
	}
	var nodes []corev1.Node
	if err := listAll(ctx, a, "/api/v1/nodes", nil, func(l *corev1.NodeList) { nodes = append(nodes, l.Items...) }); err != nil {
		return explanation{}, fmt.Errorf("nodes: %w", err)
	}
	devices := map[string]nodeDevices{}
	type ref struct{ pool, device string }
	kindOf := map[ref]deviceKind{}
	nodeOf := map[string]string{} // pool -> node
	q := url.Values{"fieldSelector": {fields.OneTermEqualSelector("spec.driver", driver).String()}}
	err = listAll(ctx, a, "/apis/resource.k8s.io/v1/resourceslices", q, func(l *resourceapi.ResourceSliceList) {
		for _, s := range l.Items {
			if s.Spec.NodeName == nil {
				continue
			}
			node := *s.Spec.NodeName
			d, ok := devices[node]
			if !ok {
				d = nodeDevices{published: map[deviceKind]int{}, allocated: map[deviceKind]int{}}
				devices[node] = d
			}
			nodeOf[s.Spec.Pool.Name] = node
			for _, dev := range s.Spec.Devices {
				k := deviceKindOf(dev)
				d.published[k]++
				kindOf[ref{s.Spec.Pool.Name, dev.Name}] = k
			}
		}
	})
	if err != nil {
		return explanation{}, fmt.Errorf("resource slices: %w", err)
	}
	// The devices other claims hold, each counted once however many
	// claims of a shared device name it. The pod's own claims, allocated
	// already, hold nothing against it.
	own := map[string]bool{}
	for _, c := range claims {
		own[c.claimName] = true
	}
	held := map[ref]bool{}
	err = listAll(ctx, a, "/apis/resource.k8s.io/v1/resourceclaims", nil, func(l *resourceapi.ResourceClaimList) {
		for _, c := range l.Items {
			if c.Status.Allocation == nil || (c.Namespace == pod.Namespace && own[c.Name]) {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Driver == driver {
					held[ref{r.Pool, r.Device}] = true
				}
			}
		}
	})
	if err != nil {
		return explanation{}, fmt.Errorf("resource claims: %w", err)
	}
	for r := range held {
		if node, ok := nodeOf[r.pool]; ok {
			devices[node].allocated[kindOf[r]]++
		}
	}
	return explain(&pod, claims, nodes, devices), nil
}

// podClaims reads the pod's claims: the ResourceClaim where it exists, the
// template while the controller has not made it yet; and each request's
// DeviceClass, to know the kind it asks.
func podClaims(ctx context.Context, a *kubeAPI, pod *corev1.Pod, driver string) ([]podClaim, error) {
	generated := map[string]string{}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			generated[s.Name] = *s.ResourceClaimName
		}
	}
	base := "/apis/resource.k8s.io/v1/namespaces/" + url.PathEscape(pod.Namespace)
	classes := map[string]deviceKind{}
	kind := func(class string) (deviceKind, error) {
		if k, ok := classes[class]; ok {
			return k, nil
		}
		var dc resourceapi.DeviceClass
		if err := a.get(ctx, "/apis/resource.k8s.io/v1/deviceclasses/"+url.PathEscape(class), nil, &dc); err != nil {
			return kindOther, fmt.Errorf("device class %s: %w", class, err)
		}
		classes[class] = classKind(&dc, driver)
		return classes[class], nil
	}
	var out []podClaim
	var errs []error
	for _, pc := range pod.Spec.ResourceClaims {
		c := podClaim{name: pc.Name}
		var spec resourceapi.ResourceClaimSpec
		switch {
		case pc.ResourceClaimName != nil || generated[pc.Name] != "":
			claimName := generated[pc.Name]
			if pc.ResourceClaimName != nil {
				claimName = *pc.ResourceClaimName
			}
			var rc resourceapi.ResourceClaim
			if err := a.get(ctx, base+"/resourceclaims/"+url.PathEscape(claimName), nil, &rc); err != nil {
				errs = append(errs, fmt.Errorf("claim %s: %w", pc.Name, err))
				continue
			}
			c.source, c.claimName = "ResourceClaim "+pod.Namespace+"/"+claimName, claimName
			spec = rc.Spec
			if al := rc.Status.Allocation; al != nil && al.NodeSelector != nil {
				c.allocated = allocatedNode(al.NodeSelector)
			}
		case pc.ResourceClaimTemplateName != nil:
			var tm resourceapi.ResourceClaimTemplate
			if err := a.get(ctx, base+"/resourceclaimtemplates/"+url.PathEscape(*pc.ResourceClaimTemplateName), nil, &tm); err != nil {
				errs = append(errs, fmt.Errorf("claim %s: %w", pc.Name, err))
				continue
			}
			c.source = "ResourceClaimTemplate " + pod.Namespace + "/" + tm.Name + ", its claim not made yet"
			spec = tm.Spec.Spec
		default:
			continue
		}
		for _, r := range spec.Devices.Requests {
			var n need
			if r.Exactly != nil {
				n.alternatives = append(n.alternatives, askedOf(r.Name, r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count, len(r.Exactly.Selectors) > 0))
			}
			for _, sub := range r.FirstAvailable {
				n.alternatives = append(n.alternatives, askedOf(r.Name+"/"+sub.Name, sub.DeviceClassName, sub.AllocationMode, sub.Count, len(sub.Selectors) > 0))
			}
			for i := range n.alternatives {
				k, err := kind(n.alternatives[i].class)
				if err != nil {
					errs = append(errs, err)
				}
				n.alternatives[i].kind = k
			}
			c.needs = append(c.needs, n)
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

func askedOf(name, class string, mode resourceapi.DeviceAllocationMode, count int64, selectors bool) asked {
	a := asked{name: name, class: class, count: count, selectors: selectors, all: mode == resourceapi.DeviceAllocationModeAll}
	if mode == "" || (mode == resourceapi.DeviceAllocationModeExactCount && count == 0) {
		a.count = 1 // the API's default
	}
	return a
}

// allocatedNode is the node an allocation's node selector names (the
// scheduler writes metadata.name In [node] for a node-local device).
func allocatedNode(ns *corev1.NodeSelector) string {
	for _, t := range ns.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return "(a node selector)"
}

// listAll reads a list in pages of 500, as kubectl does, so that a large
// cluster's list stays under the size one answer may have.
func listAll[L any, P interface {
	*L
	GetContinue() string
}](ctx context.Context, a *kubeAPI, path string, query url.Values, each func(P)) error {
	q := url.Values{"limit": {"500"}}
	for k, v := range query {
		q[k] = v
	}
	for {
		var l L
		p := P(&l)
		if err := a.get(ctx, path, q, p); err != nil {
			return err
		}
		each(p)
		next := p.GetContinue()
		if next == "" {
			return nil
		}
		q.Set("continue", next)
	}
}
