// Package podresourcestest serves the kubelet's PodResources API on a unix
// socket for tests, answering as the kubelet does from the pods it is
// given: each container with the claims it references (by claim, not by
// request), a claim made for a DRA extended resource included, sidecars
// among the init containers and no other init container.
package podresourcestest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Server is a PodResources API on a socket in a test's temporary
// directory, stopped when the test ends.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	// Socket is the socket's path.
	Socket string

	mu    sync.Mutex
	pods  []*corev1.Pod
	err   error
	calls int
}

// Start serves the API until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Socket: filepath.Join(t.TempDir(), "kubelet.sock")}
	ln, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, s)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return s
}

// SetPods sets the pods the kubelet runs.
func (s *Server) SetPods(pods ...*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

// AddPod adds a pod the kubelet runs (replacing one of its name).
func (s *Server) AddPod(pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.pods {
		if p.Namespace == pod.Namespace && p.Name == pod.Name {
			s.pods[i] = pod
			return
		}
	}
	s.pods = append(s.pods, pod)
}

// Fail makes every call fail with err (nil: answer again).
func (s *Server) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Calls is the number of List and Get calls answered or failed.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// List answers with every pod.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		resp.PodResources = append(resp.PodResources, Resources(p))
	}
	return resp, nil
}

// Resources is what the kubelet answers for a pod: its containers (sidecar
// init containers first) with the claims each references, from
// pod.spec.resourceClaims and pod.status (the names of claims made from
// templates, the extended-resource claim's request mappings). A claim
// whose name is not known yet makes the container's list empty, as the
// kubelet's does.
func Resources(pod *corev1.Pod) *podresourcesv1.PodResources {
	pr := &podresourcesv1.PodResources{Namespace: pod.Namespace, Name: pod.Name}
	always := corev1.ContainerRestartPolicyAlways
	var ctrs []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == always {
			ctrs = append(ctrs, c)
		}
	}
	ctrs = append(ctrs, pod.Spec.Containers...)
	for _, c := range ctrs {
		pr.Containers = append(pr.Containers, &podresourcesv1.ContainerResources{Name: c.Name, DynamicResources: claimsOf(pod, c)})
	}
	return pr
}

func claimsOf(pod *corev1.Pod, c corev1.Container) []*podresourcesv1.DynamicResource {
	uses := map[string]bool{}
	for _, rc := range c.Resources.Claims {
		uses[rc.Name] = true
	}
	var out []*podresourcesv1.DynamicResource
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		if !uses[pc.Name] {
			continue
		}
		name, _, err := resourceclaim.Name(pod, pc)
		if err != nil {
			return nil
		}
		if name == nil {
			continue
		}
		out = append(out, &podresourcesv1.DynamicResource{ClaimName: *name, ClaimNamespace: pod.Namespace})
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		for _, m := range st.RequestMappings {
			if m.ContainerName == c.Name {
				out = append(out, &podresourcesv1.DynamicResource{ClaimName: st.ResourceClaimName, ClaimNamespace: pod.Namespace})
				break
			}
		}
	}
	return out
}
