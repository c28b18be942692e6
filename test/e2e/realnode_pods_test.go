package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
	"github.com/efakit/efakit/topology"
)

// seen is what a container printed.
type seen struct {
	Nodes    []string          // "/dev/infiniband/uverbs3 231:195", sorted
	Env      map[string]string // its environment
	Metadata map[string]string // metadata file -> content
	Open     string            // what opening the first uverbs node gave
	Raw      string
}

// parseSeen reads harness.PrintScript's output.
func parseSeen(out string) seen {
	s := seen{Env: map[string]string{}, Metadata: map[string]string{}, Raw: out}
	section, file := "", ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "== ") {
			section = strings.TrimPrefix(line, "== ")
			continue
		}
		switch section {
		case "devices":
			// crw-rw-rw-    1 0        0         231, 192 Nov 30 16:24 uverbs0
			f := strings.Fields(line)
			if len(f) >= 10 && strings.HasPrefix(f[0], "c") {
				s.Nodes = append(s.Nodes, fmt.Sprintf("/dev/infiniband/%s %s:%s", f[len(f)-1], strings.TrimSuffix(f[4], ","), f[5]))
			}
		case "env":
			if k, v, ok := strings.Cut(line, "="); ok {
				s.Env[k] = v
			}
		case "open":
			s.Open += line
		case "metadata":
			if strings.HasPrefix(line, "# ") {
				file = strings.TrimPrefix(line, "# ")
			} else if file != "" {
				s.Metadata[file] += line + "\n"
			}
		}
	}
	sort.Strings(s.Nodes)
	return s
}

// metadataDevices lists the devices a metadata file names for driver.
func metadataDevices(t *testing.T, content string) []string {
	t.Helper()
	var out []string
	dec := json.NewDecoder(strings.NewReader(content))
	for {
		var m struct {
			Requests []struct {
				Name    string `json:"name"`
				Devices []struct {
					Driver string `json:"driver"`
					Name   string `json:"name"`
				} `json:"devices"`
			} `json:"requests"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else {
			require.NoError(t, err, content)
		}
		for _, r := range m.Requests {
			for _, d := range r.Devices {
				out = append(out, d.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// efaNodes maps each device efakit publishes for a fixture (single EFAs
// by PCI address, groups by PCIe root) to the uverbs nodes a container
// must hold for it, read from the fixture by efakit's discovery.
type efaNodes struct {
	byAddr map[string]string   // pciAddress -> "path maj:min"
	byRoot map[string][]string // pcieRoot -> nodes
}

func fixtureNodes(t *testing.T, fixture string) efaNodes {
	t.Helper()
	topo := harness.ScanFixture(t, fixture)
	e := efaNodes{byAddr: map[string]string{}, byRoot: map[string][]string{}}
	for _, d := range topo.Of(topology.KindEFA) {
		v := d.EFA.Verbs
		require.NotNil(t, v)
		node := fmt.Sprintf("%s %d:%d", v.DevicePath(), v.Major, v.Minor)
		e.byAddr[d.PCI.Address.String()] = node
		s, _ := topo.StandardAttributes(d)
		e.byRoot[s.PCIeRoot] = append(e.byRoot[s.PCIeRoot], node)
	}
	return e
}

// expect lists the uverbs nodes for the published devices of a claim's
// allocation, by the attributes the devices carry on the API server.
func (n *realNode) expect(t *testing.T, nodes efaNodes, claims ...*resourceapi.ResourceClaim) []string {
	t.Helper()
	published := n.PublishedEFAs(t)
	var out []string
	for _, c := range claims {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != resources.DefaultDriverName {
				continue
			}
			d, ok := published[r.Device]
			require.True(t, ok, "allocated device %s is published", r.Device)
			if a, ok := d.Attributes[resources.AttrPCIAddr]; ok {
				out = append(out, nodes.byAddr[*a.StringValue])
			} else {
				out = append(out, nodes.byRoot[*d.Attributes[resources.AttrPCIeRoot].StringValue]...)
			}
		}
	}
	sort.Strings(out)
	return out
}

func sharedClaim(name, claim string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimName: &claim}
}

// run creates the pod, waits until it runs and its container printed, and
// returns what the container saw and the pod's claims (by pod claim name).
func (n *realNode) run(t *testing.T, pod *corev1.Pod) (seen, map[string]*resourceapi.ResourceClaim) {
	t.Helper()
	ctx := context.Background()
	_, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return n.waitPrinted(t, pod.Name)
}

// waitPrinted waits for the pod's one container to run and print, and
// returns what it printed and the pod's claims (by pod claim name).
func (n *realNode) waitPrinted(t *testing.T, name string) (seen, map[string]*resourceapi.ResourceClaim) {
	t.Helper()
	return n.waitPrintedWithin(t, name, 90*time.Second)
}

// waitPrintedWithin is waitPrinted with another bound on the wait.
func (n *realNode) waitPrintedWithin(t *testing.T, name string, timeout time.Duration) (seen, map[string]*resourceapi.ResourceClaim) {
	t.Helper()
	ctx := context.Background()
	printed, p := n.waitRunningWithin(t, name, timeout)
	require.Len(t, printed, 1, "pod %s has one container", name)
	var out seen
	for _, s := range printed {
		out = s
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, s := range p.Status.ResourceClaimStatuses {
		claimName := s.ResourceClaimName
		require.NotNil(t, claimName)
		c, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(ctx, *claimName, metav1.GetOptions{})
		require.NoError(t, err)
		claims[s.Name] = c
	}
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			c, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
			require.NoError(t, err)
			claims[pc.Name] = c
		}
	}
	return out, claims
}

// deletePod deletes a pod and waits until it is gone (the kubelet stopped
// it and unprepared its claims; the claim controller freed them).
func (n *realNode) deletePod(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, n.CP.Client.CoreV1().Pods(harness.NodeNS).Delete(ctx, name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 60*time.Second, 100*time.Millisecond, "pod %s deleted", name)
}

// claimsOf lists a pod's claims in pod claim name order.
func claimsOf(m map[string]*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []*resourceapi.ResourceClaim
	for _, k := range names {
		out = append(out, m[k])
	}
	return out
}

// allocated lists the devices of a driver in claims.
func allocated(driverName string, claims ...*resourceapi.ResourceClaim) []string {
	var out []string
	for _, c := range claims {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == driverName {
				out = append(out, r.Device)
			}
		}
	}
	sort.Strings(out)
	return out
}
