package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// clusterState is what the explain tests' API server holds.
type clusterState struct {
	pods      []corev1.Pod
	claims    []resourceapi.ResourceClaim
	templates []resourceapi.ResourceClaimTemplate
	nodes     []corev1.Node
	slices    []resourceapi.ResourceSlice
	classes   []*resourceapi.DeviceClass
}

// explainServer serves a clusterState over TLS as the API server does,
// lists in pages of the limit asked (with continue tokens), and records
// the paths and queries asked.
type explainServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
	// answers, when not nil, keeps each answer by URL and serves it again
	// without encoding it: a benchmark then times the client alone.
	answers map[string][]byte
}

func page[T any](w http.ResponseWriter, r *http.Request, items []T, list func(items []T, cont string) any) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
	if limit <= 0 {
		limit = len(items)
	}
	to := min(from+limit, len(items))
	cont := ""
	if to < len(items) {
		cont = strconv.Itoa(to)
	}
	_ = json.NewEncoder(w).Encode(list(items[from:to], cont))
}

func newExplainServer(t testing.TB, st *clusterState) *explainServer {
	s := &explainServer{}
	mux := http.NewServeMux()
	notFound := func(w http.ResponseWriter, what string) {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Message: what + " not found", Code: 404})
	}
	one := func(pattern string, find func(ns, name string) any) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if o := find(r.PathValue("ns"), r.PathValue("name")); o != nil {
				_ = json.NewEncoder(w).Encode(o)
				return
			}
			notFound(w, fmt.Sprintf("%q", r.PathValue("name")))
		})
	}
	one("GET /api/v1/namespaces/{ns}/pods/{name}", func(ns, name string) any {
		for i := range st.pods {
			if st.pods[i].Namespace == ns && st.pods[i].Name == name {
				return &st.pods[i]
			}
		}
		return nil
	})
	one("GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}", func(ns, name string) any {
		for i := range st.claims {
			if st.claims[i].Namespace == ns && st.claims[i].Name == name {
				return &st.claims[i]
			}
		}
		return nil
	})
	one("GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/{name}", func(ns, name string) any {
		for i := range st.templates {
			if st.templates[i].Namespace == ns && st.templates[i].Name == name {
				return &st.templates[i]
			}
		}
		return nil
	})
	one("GET /apis/resource.k8s.io/v1/deviceclasses/{name}", func(_, name string) any {
		for _, dc := range st.classes {
			if dc.Name == name {
				return dc
			}
		}
		return nil
	})
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		page(w, r, st.nodes, func(items []corev1.Node, cont string) any {
			return corev1.NodeList{ListMeta: metav1.ListMeta{Continue: cont}, Items: items}
		})
	})
	mux.HandleFunc("GET /apis/resource.k8s.io/v1/resourceslices", func(w http.ResponseWriter, r *http.Request) {
		var items []resourceapi.ResourceSlice
		for _, sl := range st.slices {
			if r.URL.Query().Get("fieldSelector") == "spec.driver="+sl.Spec.Driver {
				items = append(items, sl)
			}
		}
		page(w, r, items, func(items []resourceapi.ResourceSlice, cont string) any {
			return resourceapi.ResourceSliceList{ListMeta: metav1.ListMeta{Continue: cont}, Items: items}
		})
	})
	mux.HandleFunc("GET /apis/resource.k8s.io/v1/resourceclaims", func(w http.ResponseWriter, r *http.Request) {
		page(w, r, st.claims, func(items []resourceapi.ResourceClaim, cont string) any {
			return resourceapi.ResourceClaimList{ListMeta: metav1.ListMeta{Continue: cont}, Items: items}
		})
	})
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.Path+"?"+r.URL.RawQuery)
		answer, kept := s.answers[r.URL.String()]
		s.mu.Unlock()
		if kept {
			_, _ = w.Write(answer)
			return
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		s.mu.Lock()
		if s.answers != nil && rec.Code == http.StatusOK {
			s.answers[r.URL.String()] = rec.Body.Bytes()
		}
		s.mu.Unlock()
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(s.Close)
	return s
}

// kubeconfig is a kubeconfig file for the server.
func (s *explainServer) kubeconfig(tb testing.TB) string {
	tb.Helper()
	ca := base64.StdEncoding.EncodeToString(s.Certificate().Raw)
	ca = base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----\n", ca))
	path := filepath.Join(tb.TempDir(), "config")
	require.NoError(tb, os.WriteFile(path, fmt.Appendf(nil, `current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: t}}]
`, s.URL, ca), 0o600))
	return path
}

// explainCLI runs efakit explain against the server for a pod.
func (s *explainServer) explainCLI(t *testing.T, pod string) (int, string, string) {
	t.Helper()
	return runCLI("explain", "--pod", pod, "--kubeconfig", s.kubeconfig(t))
}

// p5Node is a p5.48xlarge node with labels, and the slices efakit's
// plugin publishes for it in mode, built by the function the plugin uses.
func p5Node(t testing.TB, name string, mode resources.GroupMode, labels map[string]string) (corev1.Node, []resourceapi.ResourceSlice) {
	t.Helper()
	r, err := sysfs.Open("../../../testdata/sysfs/p5.48xlarge.sysfs")
	require.NoError(t, err)
	defer r.Close()
	topo, err := placed.Scan(r, false)
	require.NoError(t, err)
	cfg := resources.Config{DriverName: resources.DefaultDriverName, NodeName: name, Groups: mode}
	pool, err := resources.Published(topo, cfg)
	require.NoError(t, err)
	var out []resourceapi.ResourceSlice
	for _, s := range resources.Slices(pool, cfg) {
		out = append(out, *s)
	}
	all := map[string]string{"kubernetes.io/hostname": name}
	for k, v := range labels {
		all[k] = v
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}, out
}

// fleet is three p5 nodes labelled by node group: two in exclusive mode,
// one in the default mode, with efakit's classes.
func fleet(t *testing.T) *clusterState {
	st := &clusterState{classes: resources.DeviceClasses(resources.ClassOptions{})}
	for _, n := range []struct {
		name, label string
		mode        resources.GroupMode
	}{{"excl-a", "exclusive", resources.GroupsExclusive}, {"excl-b", "exclusive", resources.GroupsExclusive}, {"dflt-a", "none", resources.GroupsNone}} {
		node, slices := p5Node(t, n.name, n.mode, map[string]string{"efakit.io/groups": n.label})
		st.nodes = append(st.nodes, node)
		st.slices = append(st.slices, slices...)
	}
	return st
}

func efaRequest(name, class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
}

// pendingPod asks the template's claim on the nodes of the label's value;
// the scheduler's condition as kube-scheduler writes it.
func pendingPod(name, template string, selector map[string]string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
		Spec: corev1.PodSpec{NodeSelector: selector,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "efa", ResourceClaimTemplateName: &template}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/3 nodes are available: 2 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector."}}},
	}
}

func template(name string, reqs ...resourceapi.DeviceRequest) resourceapi.ResourceClaimTemplate {
	return resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}}
}

// TestExplainSingleEFAOnExclusiveNodes: a pod that asks one EFA of a node
// group in exclusive mode: efakit explain names the nodes, their mode,
// the request they cannot serve and the class that would; exit 1. The
// same claim on the default-mode node is one efakit finds servable.
func TestExplainSingleEFAOnExclusiveNodes(t *testing.T) {
	t.Parallel()
	st := fleet(t)
	st.templates = append(st.templates, template("one-efa", efaRequest("efa", resources.DefaultDeviceClass, 1)))
	st.pods = append(st.pods,
		pendingPod("on-exclusive", "one-efa", map[string]string{"efakit.io/groups": "exclusive"}),
		pendingPod("on-default", "one-efa", map[string]string{"efakit.io/groups": "none"}))
	srv := newExplainServer(t, st)

	code, out, errOut := srv.explainCLI(t, "ml/on-exclusive")
	assert.Equal(t, 1, code, errOut)
	assert.Equal(t, `pod ml/on-exclusive is pending.
the scheduler says: 0/3 nodes are available: 2 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector.
claim "efa" (ResourceClaimTemplate ml/one-efa, its claim not made yet):
  request "efa": 1 single EFA (class efa.networking.k8s.aws)
nodes the pod may run on (its node selector and required node affinity): 2 of 3
  2 nodes in exclusive mode (EFA groups only): excl-a, excl-b
    cannot serve request "efa": the node publishes no single EFA
why: no node the pod may run on can serve its EFA requests.
fix: these nodes publish EFA groups only (--groups=exclusive): ask for groups (class efa-group.networking.k8s.aws; efakit claims --groups exclusive prints templates), or run the pod on nodes in the default or mixed mode.
`, out)

	code, out, errOut = srv.explainCLI(t, "ml/on-default")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "  1 node in the default mode (single EFAs only): dflt-a\n    can serve the EFA requests by kind and count\n")
	assert.Contains(t, out, "efakit finds 1 node the pod may run on with the EFAs its claims ask")
}

// TestExplainCounts: a group asked of default-mode nodes, more EFAs than
// a node has, and EFAs other claims hold; a firstAvailable request that
// a group serves where a single EFA cannot be had.
func TestExplainCounts(t *testing.T) {
	t.Parallel()
	st := fleet(t)
	st.templates = append(st.templates,
		template("group", efaRequest("efas", resources.DefaultGroupDeviceClass, 1)),
		template("many", efaRequest("efas", resources.DefaultDeviceClass, 33)),
		template("eight", efaRequest("efas", resources.DefaultDeviceClass, 8)),
		template("either", resourceapi.DeviceRequest{Name: "efa", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "single", DeviceClassName: resources.DefaultDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			{Name: "group", DeviceClassName: resources.DefaultGroupDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}))
	dflt := map[string]string{"efakit.io/groups": "none"}
	st.pods = append(st.pods, pendingPod("group", "group", dflt), pendingPod("many", "many", dflt), pendingPod("eight", "eight", dflt),
		pendingPod("either", "either", map[string]string{"efakit.io/groups": "exclusive"}))
	// Another claim holds 30 of dflt-a's 32 EFAs.
	held := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "held"}}
	held.Status.Allocation = &resourceapi.AllocationResult{}
	for _, s := range st.slices {
		if *s.Spec.NodeName != "dflt-a" {
			continue
		}
		for _, d := range s.Spec.Devices {
			if len(held.Status.Allocation.Devices.Results) < 30 {
				held.Status.Allocation.Devices.Results = append(held.Status.Allocation.Devices.Results,
					resourceapi.DeviceRequestAllocationResult{Request: "efas", Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name})
			}
		}
	}
	st.claims = append(st.claims, held)
	srv := newExplainServer(t, st)

	code, out, _ := srv.explainCLI(t, "ml/group")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `cannot serve request "efas": the node publishes no EFA group`)
	assert.Contains(t, out, "fix: these nodes publish single EFAs only (the default mode): ask for single EFAs (class efa.networking.k8s.aws")

	code, out, _ = srv.explainCLI(t, "ml/many")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `cannot serve request "efas": the node publishes 32 single EFAs, 33 asked`)
	assert.Contains(t, out, "fix: ask for no more than a node has (efakit claims --sysfs CAPTURE prints counts that fit).\n")

	code, out, _ = srv.explainCLI(t, "ml/eight")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `cannot serve request "efas": the node has 2 of its 32 single EFAs free, the rest allocated to other claims`)
	assert.Contains(t, out, "fix: other claims hold the EFAs: the pod runs once they are released, or on more nodes.\n")

	code, out, _ = srv.explainCLI(t, "ml/either")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "  request \"efa/single\": 1 single EFA (class efa.networking.k8s.aws)\n    or request \"efa/group\": 1 EFA group (class efa-group.networking.k8s.aws)\n")
	assert.Contains(t, out, "can serve the EFA requests by kind and count")

	// Three nodes fit one page: no list went on with a continue token.
	var continued bool
	for _, r := range srv.seen {
		continued = continued || strings.Contains(r, "continue=")
	}
	assert.False(t, continued, "three nodes fit one page of 500")
}

// TestExplainClaimsTogether: two claims that each fit a node's free EFAs
// but not both at once; nodes where no efakit plugin publishes.
func TestExplainClaimsTogether(t *testing.T) {
	t.Parallel()
	st := fleet(t)
	st.nodes = append(st.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: map[string]string{"efakit.io/groups": "bare"}}})
	st.templates = append(st.templates, template("twenty", efaRequest("efas", resources.DefaultDeviceClass, 20)))
	two := pendingPod("two", "twenty", map[string]string{"efakit.io/groups": "none"})
	tn := "twenty"
	two.Spec.ResourceClaims = append(two.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "more", ResourceClaimTemplateName: &tn})
	st.pods = append(st.pods, two, pendingPod("bare", "twenty", map[string]string{"efakit.io/groups": "bare"}))
	srv := newExplainServer(t, st)

	code, out, _ := srv.explainCLI(t, "ml/two")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "  1 node in the default mode (single EFAs only): dflt-a\n    cannot serve the requests together: 40 single EFAs asked, the node has 32 free\n")

	code, out, _ = srv.explainCLI(t, "ml/bare")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "  1 node in no EFA published (no efakit plugin, or no EFA): bare\n    cannot serve request \"efas\": the node publishes no single EFA\n")
	assert.Contains(t, out, "fix: these nodes publish no efakit device: is the plugin running there?")
	assert.NotContains(t, out, "groups only", "a node without devices is no node in exclusive mode")
}

// TestExplainReadsEveryPage: a list longer than a page is read to its end.
func TestExplainReadsEveryPage(t *testing.T) {
	t.Parallel()
	st := fleet(t)
	for i := range 1200 {
		st.nodes = append(st.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%04d", i)}})
	}
	st.templates = append(st.templates, template("one-efa", efaRequest("efa", resources.DefaultDeviceClass, 1)))
	st.pods = append(st.pods, pendingPod("anywhere", "one-efa", nil))
	srv := newExplainServer(t, st)
	code, out, errOut := srv.explainCLI(t, "ml/anywhere")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "nodes the pod may run on (its node selector and required node affinity): 1203 of 1203\n")
	assert.Contains(t, out, "  1200 nodes in no EFA published (no efakit plugin, or no EFA): cpu-0000, cpu-0001, cpu-0002, cpu-0003, cpu-0004 and 1195 more\n")
	pages := 0
	for _, r := range srv.seen {
		if strings.HasPrefix(r, "/api/v1/nodes?") {
			pages++
		}
	}
	assert.Equal(t, 3, pages, "1203 nodes in pages of 500")
}

// TestExplainBoundAndAllocated: a bound pod is said bound (exit 0); a
// claim made already is read in place of its template, with the node it
// is allocated on.
func TestExplainBoundAndAllocated(t *testing.T) {
	t.Parallel()
	st := fleet(t)
	bound := pendingPod("bound", "one-efa", nil)
	bound.Spec.NodeName = "dflt-a"
	claimName := "waiting-efa-x7k2p"
	waiting := pendingPod("waiting", "one-efa", map[string]string{"efakit.io/groups": "exclusive"})
	waiting.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "efa", ResourceClaimName: &claimName}}
	st.pods = append(st.pods, bound, waiting)
	// The pod's claim asks every group of a node and is allocated on
	// excl-a already (the scheduler binds the pod next): its own devices
	// hold nothing against it.
	own := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: claimName},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "efa",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: resources.DefaultGroupDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeAll}}}}}}
	own.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"excl-a"}}}}}}}
	for _, s := range st.slices {
		if *s.Spec.NodeName == "excl-a" {
			for _, d := range s.Spec.Devices {
				own.Status.Allocation.Devices.Results = append(own.Status.Allocation.Devices.Results,
					resourceapi.DeviceRequestAllocationResult{Request: "efa", Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name})
			}
		}
	}
	st.claims = append(st.claims, own)
	srv := newExplainServer(t, st)

	code, out, _ := srv.explainCLI(t, "ml/bound")
	assert.Equal(t, 0, code)
	assert.Equal(t, "pod ml/bound is bound to node dflt-a.\n", out)

	code, out, _ = srv.explainCLI(t, "ml/waiting")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "claim \"efa\" (ResourceClaim ml/waiting-efa-x7k2p):\n  allocated on node excl-a\n  request \"efa\": every EFA group (class efa-group.networking.k8s.aws)\n")
	assert.Contains(t, out, "2 nodes in exclusive mode (EFA groups only): excl-a, excl-b\n    can serve")
}

// TestExplainRefuses: a pod that is not there, a class that is not there,
// and a --pod without a namespace.
func TestExplainRefuses(t *testing.T) {
	t.Parallel()
	st := fleet(t)
	st.templates = append(st.templates, template("odd", efaRequest("efa", "no-such-class", 1)))
	st.pods = append(st.pods, pendingPod("odd", "odd", nil))
	srv := newExplainServer(t, st)
	code, _, errOut := srv.explainCLI(t, "ml/missing")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `efakit explain: "missing" not found`)
	code, _, errOut = srv.explainCLI(t, "ml/odd")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "device class no-such-class:")
	code, _, errOut = srv.explainCLI(t, "odd")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--pod wants namespace/name, not "odd"`)
}

// TestPodNodeFilter: node selector and required affinity as the
// scheduler reads them.
func TestPodNodeFilter(t *testing.T) {
	t.Parallel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a", "gen": "5"}}}
	affinity := func(terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}}}
	}
	expr := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no constraint", &corev1.Pod{}, true},
		{"selector holds", &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "a"}}}, true},
		{"selector fails", &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "b"}}}, false},
		{"In", affinity(expr("zone", corev1.NodeSelectorOpIn, "b", "a")), true},
		{"NotIn", affinity(expr("zone", corev1.NodeSelectorOpNotIn, "a")), false},
		{"Exists", affinity(expr("gen", corev1.NodeSelectorOpExists)), true},
		{"DoesNotExist", affinity(expr("gen", corev1.NodeSelectorOpDoesNotExist)), false},
		{"Gt", affinity(expr("gen", corev1.NodeSelectorOpGt, "4")), true},
		{"Lt", affinity(expr("gen", corev1.NodeSelectorOpLt, "4")), false},
		{"terms are ORed", affinity(expr("zone", corev1.NodeSelectorOpIn, "b"), expr("gen", corev1.NodeSelectorOpIn, "5")), true},
		{"empty term matches nothing", affinity(corev1.NodeSelectorTerm{}), false},
		{"matchFields name", affinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}), true},
		{"matchFields other", affinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n2"}}}}), false},
	} {
		assert.Equal(t, c.want, podNodeFilter(c.pod, node), c.name)
	}
}

// BenchmarkExplain: efakit explain of a pod pending on a fleet of p5
// nodes in exclusive mode (8 group devices each) beside as many in the
// default mode (32 EFAs each), the answers kept so that the client's
// reads, decoding and judgement are timed, TLS included. One op is one
// explain; -benchmem gives its allocations.
func BenchmarkExplain(b *testing.B) {
	for _, nodes := range []int{500, 2000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			st := &clusterState{classes: resources.DeviceClasses(resources.ClassOptions{})}
			for i := range nodes {
				mode, label := resources.GroupsExclusive, "exclusive"
				if i%2 == 1 {
					mode, label = resources.GroupsNone, "none"
				}
				node, slices := p5Node(b, fmt.Sprintf("node-%05d", i), mode, map[string]string{"efakit.io/groups": label})
				st.nodes = append(st.nodes, node)
				st.slices = append(st.slices, slices...)
			}
			st.templates = append(st.templates, template("one-efa", efaRequest("efa", resources.DefaultDeviceClass, 1)))
			st.pods = append(st.pods, pendingPod("trainer", "one-efa", map[string]string{"efakit.io/groups": "exclusive"}))
			srv := newExplainServer(b, st)
			srv.answers = map[string][]byte{}
			api, err := apiFromKubeconfig(context.Background(), srv.kubeconfig(b), "efakit-bench")
			require.NoError(b, err)
			e, err := explainPod(context.Background(), api, "ml", "trainer", resources.DefaultDriverName)
			require.NoError(b, err)
			require.False(b, e.served)
			for b.Loop() {
				if _, err := explainPod(context.Background(), api, "ml", "trainer", resources.DefaultDriverName); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
