package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilptr "k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/plugin/driver/claimstatus"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/test/e2e/harness"
)

// The extended resource of AWS's EFA device plugin, which the chart's
// class declares, and one more class with efakit's libfabric environment.
const (
	efaResource       = corev1.ResourceName(resources.DevicePluginResource)
	libfabricResource = corev1.ResourceName("efakit.test/efa-libfabric")
	libfabricClass    = "efa-libfabric.efakit.test"
)

// resourcePod is a pod on the node whose containers each ask for a count
// of an extended resource in their limits, as device-plugin pod specs
// do, run harness.PrintScript, and use the named pod claims (pod claim name ->
// template) too.
func (n *realNode) resourcePod(name string, ctrs map[string]corev1.ResourceList, claims map[string][]corev1.PodResourceClaim) *corev1.Pod {
	pod := n.PrinterPod(name)
	pod.Spec.Containers = nil
	var names []string
	for c := range ctrs {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		ctr := corev1.Container{Name: c, Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", harness.PrintScript},
			Resources: corev1.ResourceRequirements{Limits: ctrs[c], Requests: ctrs[c]}}
		for _, pc := range claims[c] {
			pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, pc)
			ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: pc.Name})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, ctr)
	}
	return pod
}

func efas(resourceName corev1.ResourceName, n int64) corev1.ResourceList {
	return corev1.ResourceList{resourceName: *resource.NewQuantity(n, resource.DecimalSI)}
}

// runAll creates the pod, waits until every container runs and printed,
// and returns what each printed and the pod as the API has it then.
func (n *realNode) runAll(t *testing.T, pod *corev1.Pod) (map[string]seen, *corev1.Pod) {
	t.Helper()
	_, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return n.waitRunning(t, pod.Name)
}

// waitRunning waits until every container of a pod runs and printed, and
// returns what each printed (read through the API's pod logs) and the pod
// as the API has it then.
func (n *realNode) waitRunning(t *testing.T, name string) (map[string]seen, *corev1.Pod) {
	t.Helper()
	return n.waitRunningWithin(t, name, 90*time.Second)
}

// waitRunningWithin is waitRunning with another bound on the wait.
func (n *realNode) waitRunningWithin(t *testing.T, name string, timeout time.Duration) (map[string]seen, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	pod, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	p := pod
	harness.Eventually(t, func() bool {
		got, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		p = got
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(pod.Spec.Containers) {
			return false
		}
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready {
				return false
			}
		}
		return true
	}, timeout, 100*time.Millisecond, func() string {
		return fmt.Sprintf("pod %s not running: %+v\nevents:\n%s\nkubelet:\n%s\nplugin:\n%s\nkube-scheduler:\n%s\nkube-controller-manager:\n%s",
			name, p.Status, strings.Join(n.podEvents(name), "\n"), n.LogTail("kubelet", 3000), n.LogTail("efakit-plugin", 2000),
			n.CP.LogTail("kube-scheduler", 1500), n.CP.LogTail("kube-controller-manager", 1500))
	})
	out := map[string]seen{}
	for _, c := range pod.Spec.Containers {
		var logs string
		require.Eventually(t, func() bool {
			b, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).GetLogs(name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			logs = string(b)
			return err == nil && strings.Contains(logs, "== end")
		}, 30*time.Second, 100*time.Millisecond, "pod %s container %s logs", name, c.Name)
		out[c.Name] = parseSeen(logs)
	}
	return out, p
}

// extendedClaim is the claim the scheduler made for the pod's extended
// resources, and each container's requests of it.
func (n *realNode) extendedClaim(t *testing.T, p *corev1.Pod) (*resourceapi.ResourceClaim, map[string][]string) {
	t.Helper()
	st := p.Status.ExtendedResourceClaimStatus
	require.NotNil(t, st, "pod %s has no extended-resource claim", p.Name)
	c, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(context.Background(), st.ResourceClaimName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "true", c.Annotations[resourceapi.ExtendedResourceClaimAnnotation])
	reqs := map[string][]string{}
	for _, m := range st.RequestMappings {
		reqs[m.ContainerName] = append(reqs[m.ContainerName], m.RequestName)
	}
	return c, reqs
}

// nodesOf lists the uverbs nodes of the EFAs a claim's allocation gives
// the named requests (all when none).
func (n *realNode) nodesOf(t *testing.T, nodes efaNodes, c *resourceapi.ResourceClaim, requests ...string) []string {
	t.Helper()
	published := n.PublishedEFAs(t)
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != resources.DefaultDriverName || (len(requests) > 0 && !slices.Contains(requests, r.Request)) {
			continue
		}
		d, ok := published[r.Device]
		require.True(t, ok, "allocated device %s is published", r.Device)
		out = append(out, nodes.byAddr[*d.Attributes[resources.AttrPCIAddr].StringValue])
	}
	sort.Strings(out)
	return out
}

// waitPending waits until the scheduler says why the pod does not fit,
// in a message holding want.
func (n *realNode) waitPending(t *testing.T, name, want string) string {
	t.Helper()
	var msg string
	harness.Eventually(t, func() bool {
		p, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				msg = cond.Message
				return strings.Contains(cond.Message, want)
			}
		}
		return false
	}, 60*time.Second, 200*time.Millisecond, func() string { return fmt.Sprintf("pod %s pending with %q; last: %q", name, want, msg) })
	return msg
}

// waitRefused waits until the kubelet's prepare of the pod's claims fails
// with the plugin's message holding want, and returns the event.
func (n *realNode) waitRefused(t *testing.T, name, want string) string {
	t.Helper()
	var got string
	harness.Eventually(t, func() bool {
		for _, e := range n.podEvents(name) {
			if strings.HasPrefix(e, "FailedPrepareDynamicResources") && strings.Contains(e, want) {
				got = e
				return true
			}
		}
		return false
	}, 90*time.Second, 200*time.Millisecond, func() string {
		return fmt.Sprintf("pod %s refused with %q; events: %v\nplugin:\n%s", name, want, n.podEvents(name), n.LogTail("efakit-plugin", 3000))
	})
	return got
}

// libfabricDeviceClass selects efakit's single EFAs, like the chart's
// class, under another extended resource, and asks for the libfabric
// environment in its configuration.
func libfabricDeviceClass() *resourceapi.DeviceClass {
	dc := resources.DeviceClasses(resources.ClassOptions{ClassName: libfabricClass, ExtendedResourceName: string(libfabricResource)})[0]
	dc.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver: resources.DefaultDriverName, Parameters: runtimeRaw(`{"apiVersion": "efakit.io/v1alpha1", "kind": "EFAConfig", "env": "libfabric"}`)}}}}
	return dc
}

// TestRealNodeExtendedResources: pod specs written for AWS's EFA device
// plugin (vpc.amazonaws.com/efa in a container's resources) run unchanged
// on a p5 node through the chart's DeviceClass, whose
// extendedResourceName makes the real kube-scheduler create a claim for
// them (DRA extended resources, GA in 1.37), and the real kubelet,
// containerd and runc give each container exactly its EFAs: one
// container, several, more than fit, delete and reuse, the libfabric
// environment from a class's configuration (each container its own
// FI_EFA_IFACE; a container that mixes them with a claim of its own is
// refused), a group mode.
func TestRealNodeExtendedResources(t *testing.T) {
	c := harness.APIServer(t)
	require.NoError(t, c.StartSchedulerOnce())
	ctx := context.Background()
	n := startRealNode(t, c)
	n.EnsureNamespace()
	n.StartEFAKit(p5Fixture)
	n.WaitEFAs(t, 32)
	nodes := fixtureNodes(t, p5Fixture)
	harness.CreateSeed(t, c, "seed-claims.yaml")
	assert.Contains(t, n.LogTail("efakit-plugin", 1<<20), "Pods that ask for the extended resource get EFAs through DRA", "the plugin read the chart's class")

	t.Run("one-container", func(t *testing.T) {
		got, p := n.runAll(t, n.resourcePod("ext-one", map[string]corev1.ResourceList{"train": efas(efaResource, 4)}, nil))
		claim, reqs := n.extendedClaim(t, p)
		require.Len(t, got["train"].Nodes, 4)
		assert.Equal(t, n.nodesOf(t, nodes, claim, reqs["train"]...), got["train"].Nodes, "exactly its four EFAs' uverbs nodes")
		assert.NotContains(t, got["train"].Env, "FI_EFA_IFACE")
		var meta []string
		for file, content := range got["train"].Metadata {
			if strings.HasSuffix(file, "/dra.net-metadata.json") {
				meta = append(meta, metadataDevices(t, content)...)
			}
		}
		sort.Strings(meta)
		assert.Equal(t, allocated(resources.DefaultDriverName, claim), meta, "the device metadata names its EFAs")
		n.deletePod(t, "ext-one")
	})
	t.Run("several-containers", func(t *testing.T) {
		got, p := n.runAll(t, n.resourcePod("ext-two", map[string]corev1.ResourceList{"a": efas(efaResource, 2), "b": efas(efaResource, 3)}, nil))
		claim, reqs := n.extendedClaim(t, p)
		require.Len(t, got["a"].Nodes, 2)
		require.Len(t, got["b"].Nodes, 3)
		assert.Equal(t, n.nodesOf(t, nodes, claim, reqs["a"]...), got["a"].Nodes)
		assert.Equal(t, n.nodesOf(t, nodes, claim, reqs["b"]...), got["b"].Nodes)
		for _, x := range got["a"].Nodes {
			assert.NotContains(t, got["b"].Nodes, x, "the two containers share no EFA")
		}
		n.deletePod(t, "ext-two")
	})
	t.Run("more-than-fit-then-delete-and-reuse", func(t *testing.T) {
		all, p := n.runAll(t, n.resourcePod("ext-32", map[string]corev1.ResourceList{"train": efas(efaResource, 32)}, nil))
		require.Len(t, all["train"].Nodes, 32)
		claim, _ := n.extendedClaim(t, p)
		assert.Len(t, allocated(resources.DefaultDriverName, claim), 32)
		// The node is full: one more EFA does not fit.
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.resourcePod("ext-1-more", map[string]corev1.ResourceList{"train": efas(efaResource, 1)}, nil), metav1.CreateOptions{})
		require.NoError(t, err)
		n.waitPending(t, "ext-1-more", "")
		n.deletePod(t, "ext-32")
		// Its EFAs are free again: the pending pod runs.
		got, _ := n.waitRunning(t, "ext-1-more")
		assert.Len(t, got["train"].Nodes, 1)
		n.deletePod(t, "ext-1-more")
		// 33 never fits a claim: the scheduler says so.
		_, err = c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.resourcePod("ext-33", map[string]corev1.ResourceList{"train": efas(efaResource, 33)}, nil), metav1.CreateOptions{})
		require.NoError(t, err)
		t.Logf("33 EFAs: %s", n.waitPending(t, "ext-33", "exceeds the claim limit of 32"))
		n.deletePod(t, "ext-33")
		again, _ := n.runAll(t, n.resourcePod("ext-32-again", map[string]corev1.ResourceList{"train": efas(efaResource, 32)}, nil))
		assert.Equal(t, all["train"].Nodes, again["train"].Nodes, "every EFA reused")
		n.deletePod(t, "ext-32-again")
	})
	_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, libfabricDeviceClass(), metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))
	t.Run("env-libfabric-from-the-class", func(t *testing.T) {
		published := n.PublishedEFAs(t)
		rdmaOf := func(claim *resourceapi.ResourceClaim, reqs []string) string {
			var names []string
			for _, r := range claim.Status.Allocation.Devices.Results {
				if slices.Contains(reqs, r.Request) {
					names = append(names, *published[r.Device].Attributes[resources.AttrRDMADev].StringValue)
				}
			}
			return sortedList(strings.Join(names, ","))
		}
		got, p := n.runAll(t, n.resourcePod("ext-env", map[string]corev1.ResourceList{"a": efas(libfabricResource, 2), "b": efas(libfabricResource, 3)}, nil))
		claim, reqs := n.extendedClaim(t, p)
		for _, ctr := range []string{"a", "b"} {
			assert.Equal(t, "efa", got[ctr].Env["FI_PROVIDER"], ctr)
			assert.Equal(t, rdmaOf(claim, reqs[ctr]), sortedList(got[ctr].Env["FI_EFA_IFACE"]), "container %s: FI_EFA_IFACE names exactly its EFAs", ctr)
			assert.Equal(t, n.nodesOf(t, nodes, claim, reqs[ctr]...), got[ctr].Nodes, ctr)
		}
		n.deletePod(t, "ext-env")

		// A container that takes the class's EFAs and a claim's: one
		// FI_EFA_IFACE cannot name them all, so the plugin refuses.
		pod := n.resourcePod("ext-env-mixed", map[string]corev1.ResourceList{"train": efas(libfabricResource, 2)},
			map[string][]corev1.PodResourceClaim{"train": {harness.TemplateClaim("own", "single-efa-claim")}})
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		ev := n.waitRefused(t, "ext-env-mixed", "takes EFAs from 2 requests")
		assert.Contains(t, ev, "(extended resources) request of class "+libfabricClass)
		t.Logf("refused: %s", ev)
		n.deletePod(t, "ext-env-mixed")
	})
	t.Run("doctor-in-the-pod", func(t *testing.T) { n.checkDoctorInPod(t) })
	t.Run("group-mode-mixed", func(t *testing.T) {
		n.KillEFAKit(syscall.SIGTERM)
		n.StartEFAKit(p5Fixture, "--set", "groups=mixed")
		n.WaitEFAs(t, 40)
		harness.CreateTemplates(t, c, p5Fixture, resources.GroupsMixed, "mixed-")
		// The extended resource takes single EFAs; the counters keep a
		// group from a root whose members it holds.
		got, p := n.runAll(t, n.resourcePod("ext-mixed", map[string]corev1.ResourceList{"train": efas(efaResource, 30)}, nil))
		require.Len(t, got["train"].Nodes, 30)
		claim, _ := n.extendedClaim(t, p)
		for _, d := range allocated(resources.DefaultDriverName, claim) {
			assert.False(t, strings.HasPrefix(d, "efa-group-"), "the single-EFA class gives no group: %s", d)
		}
		_, err := c.Client.CoreV1().Pods(harness.NodeNS).Create(ctx, n.PrinterPod("group", harness.TemplateClaim("c", "mixed-efa-group")), metav1.CreateOptions{})
		require.NoError(t, err)
		n.waitPending(t, "group", "")
		n.deletePod(t, "ext-mixed")
		grp, _ := n.waitPrinted(t, "group")
		assert.Len(t, grp.Nodes, 4, "a root's four EFAs, once the extended resource's are free")
		n.deletePod(t, "group")
		n.KillEFAKit(syscall.SIGTERM)
		n.StartEFAKit(p5Fixture)
		n.WaitEFAs(t, 32)
	})
}

// statusEntries are a claim's status.devices of dra.net, by device (and
// share), read from the API as kubectl get resourceclaim -o yaml does.
func (n *realNode) statusEntries(t *testing.T, name string) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	c, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	out := map[string]resourceapi.AllocatedDeviceStatus{}
	for _, d := range c.Status.Devices {
		if d.Driver == resources.DefaultDriverName {
			k := d.Device
			if d.ShareID != nil {
				k += "/" + *d.ShareID
			}
			out[k] = d
		}
	}
	return out
}

// claimYAML is the claim as `kubectl get resourceclaim -o yaml` prints it.
func (n *realNode) claimYAML(t *testing.T, name string) string {
	c, err := n.CP.Client.ResourceV1().ResourceClaims(harness.NodeNS).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	c.ManagedFields = nil
	b, err := yaml.Marshal(c.Status)
	require.NoError(t, err)
	return string(b)
}

func conditionOf(d resourceapi.AllocatedDeviceStatus, typ string) metav1.Condition {
	return utilptr.Deref(meta.FindStatusCondition(d.Conditions, typ), metav1.Condition{})
}

func dataOf(t *testing.T, d resourceapi.AllocatedDeviceStatus) claimstatus.EFAData {
	t.Helper()
	require.NotNil(t, d.Data, "entry %s has data", d.Device)
	var out claimstatus.EFAData
	require.NoError(t, json.Unmarshal(d.Data.Raw, &out))
	return out
}

// doctorImage is busybox with efakit (the CLI, static) at /bin/efakit.
const doctorImage = "efakit.test/doctor:e2e"

// importDoctorImage builds the efakit CLI for this machine and imports an
// image of busybox and it into the node's containerd.
func (n *realNode) importDoctorImage() {
	t := n.T
	bin := filepath.Join(n.Dir, "efakit")
	b := exec.Command("go", "build", "-o", bin, "./cmd/efakit")
	b.Dir = "../../plugin"
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := b.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/efakit: %s", out)
	links := map[string]string{}
	for _, a := range []string{"sh", "ls", "cat", "echo", "sleep"} {
		links["/bin/"+a] = "busybox"
	}
	img, err := harness.ImageOf(map[string]string{"/bin/busybox": n.Bins.Busybox, "/bin/efakit": bin}, links, []string{"/bin/sh"})
	require.NoError(t, err)
	tag, err := name.NewTag(doctorImage)
	require.NoError(t, err)
	file := filepath.Join(n.Dir, "images", "doctor.tar")
	require.NoError(t, tarball.WriteToFile(file, tag, img))
	out, err = exec.Command(n.Bins.Ctr, "--address", n.Sock, "-n", "k8s.io", "images", "import", "--all-platforms", file).CombinedOutput()
	require.NoError(t, err, "ctr images import: %s", out)
}

// doctorPod runs efakit doctor in a container with the node's sysfs (the
// fixture the plugin reads) at /host/sys, and prints its JSON report.
func (n *realNode) doctorPod(name string, limits corev1.ResourceList, claims ...corev1.PodResourceClaim) *corev1.Pod {
	pod := n.PrinterPod(name, claims...)
	ctr := &pod.Spec.Containers[0]
	ctr.Name, ctr.Image = "doctor", doctorImage
	ctr.Command = []string{"sh", "-c", "efakit doctor --sysfs /host/sys -o json; echo '== end'; exec sleep 100000"}
	ctr.Resources.Limits, ctr.Resources.Requests = limits, limits
	ctr.VolumeMounts = []corev1.VolumeMount{{Name: "sys", MountPath: "/host/sys", ReadOnly: true}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "sys", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: n.Unpack(p5Fixture)}}}}
	return pod
}

// doctorReport runs a doctor pod and returns its report.
func (n *realNode) doctorReport(t *testing.T, pod *corev1.Pod) doctorJSON {
	t.Helper()
	_, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var logs string
	harness.Eventually(t, func() bool {
		b, err := n.CP.Client.CoreV1().Pods(harness.NodeNS).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		logs = string(b)
		return err == nil && strings.Contains(logs, "== end")
	}, 90*time.Second, 200*time.Millisecond, func() string {
		return fmt.Sprintf("doctor pod %s: %s; events %v", pod.Name, logs, n.podEvents(pod.Name))
	})
	var rep doctorJSON
	require.NoError(t, json.Unmarshal([]byte(logs[:strings.Index(logs, "== end")]), &rep), logs)
	n.deletePod(t, pod.Name)
	return rep
}

// doctorJSON is efakit doctor -o json's report.
type doctorJSON struct {
	Place  string `json:"place"`
	Checks []struct {
		ID, Status, Message, Fix string
	} `json:"checks"`
}

func (r doctorJSON) check(id string) (status, message string) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c.Status, c.Message
		}
	}
	return "", ""
}

// checkDoctorInPod: efakit doctor in a container that got four EFAs
// through the extended resource reports them as it does for a container
// that got four through a claim: the same status for every check, its
// four EFAs in the device metadata.
func (n *realNode) checkDoctorInPod(t *testing.T) {
	n.importDoctorImage()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "four-efas", Namespace: harness.NodeNS}}
	tmpl.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "efas", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: resources.DefaultDeviceClass, Count: 4}}}
	_, err := n.CP.Client.ResourceV1().ResourceClaimTemplates(harness.NodeNS).Create(context.Background(), tmpl, metav1.CreateOptions{})
	require.NoError(t, harness.CreateIgnoreExists(err))
	ext := n.doctorReport(t, n.doctorPod("doctor-ext", efas(efaResource, 4)))
	claim := n.doctorReport(t, n.doctorPod("doctor-claim", nil, harness.TemplateClaim("efas", "four-efas")))
	assert.Equal(t, "pod", ext.Place)
	require.Equal(t, len(claim.Checks), len(ext.Checks))
	for _, c := range claim.Checks {
		status, msg := ext.check(c.ID)
		assert.Equal(t, c.Status, status, "check %s: extended resource %q, claim %q", c.ID, msg, c.Message)
	}
	// The EFAs its metadata names, in the extended-resource claim's
	// metadata file (no EFA driver answers behind the nodes here, so
	// none opens: the same for both pods).
	status, msg := ext.check("device-metadata")
	t.Logf("doctor in the extended-resource pod, device-metadata: %s: %s", status, msg)
	assert.Equal(t, 4, strings.Count(msg, "resourceclaims/doctor-ext-extended-resources-"), "its four EFAs in the extended-resource claim's metadata: %s", msg)
	_, claimMsg := claim.check("device-metadata")
	assert.Equal(t, 4, strings.Count(claimMsg, "resourceclaimtemplates/efas/efas/dra.net-metadata.json"), claimMsg)
	_, msg = ext.check("uverbs-nodes")
	assert.Contains(t, msg, "28 not in /dev/infiniband", "its four nodes, not the node's other 28: %s", msg)
}
