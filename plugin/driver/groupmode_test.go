package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/live"
	"github.com/efakit/efakit/rdmans"
)

const groupsLabel = "efakit.io/groups"

// served is a running Serve: done is closed when it returns err.
type served struct {
	done chan struct{}
	err  error
}

// stopped waits for Serve to return, at most d, and says whether it did.
func (s *served) stopped(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// serveLabelled starts the plugin on the p5 capture for a Node labelled
// groupsLabel=value (no label for ""), with --groups=flag and
// --groups-node-label; it returns the client, the Node, the plugin's
// ready channel and its Serve.
func serveLabelled(t *testing.T, value string, flag resources.GroupMode) (*fake.Clientset, *v1.Node, <-chan struct{}, *served) {
	t.Helper()
	client := fake.NewClientset()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid", Labels: map[string]string{"node.kubernetes.io/instance-type": "p5.48xlarge"}}}
	if value != "" {
		n.Labels[groupsLabel] = value
	}
	n, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	for _, d := range []string{filepath.Join(proc, "sys/kernel/random"), filepath.Join(dir, "reg")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(proc, "sys/kernel/random/boot_id"), []byte(bootA+"\n"), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	ready, srv := make(chan struct{}), &served{done: make(chan struct{})}
	opts := driver.ServeOptions{
		Config:     resources.Config{NodeName: node, Groups: flag, GroupsNodeLabel: groupsLabel},
		KubeClient: client,
		Paths: driver.Paths{SysfsRoot: p5, ProcRoot: proc, CDIRoot: filepath.Join(dir, "cdi"),
			RegistrarDir: filepath.Join(dir, "reg"), PluginsDir: filepath.Join(dir, "plugins")},
		Ready: ready, Kernel: driver.Kernel{Live: live.Static{Mode: rdmans.Shared}},
	}
	go func() {
		srv.err = driver.Serve(ctx, opts)
		close(srv.done)
	}()
	t.Cleanup(func() {
		cancel()
		if !srv.stopped(30 * time.Second) {
			t.Error("the plugin did not stop")
		}
	})
	return client, n, ready, srv
}

// published counts the node's published single EFAs and groups.
func published(t *testing.T, client *fake.Clientset) (singles, groups int) {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			switch kind := d.Attributes[resources.AttrKind]; {
			case kind.StringValue != nil && *kind.StringValue == resources.KindGroup:
				groups++
			default:
				singles++
			}
		}
	}
	return singles, groups
}

// TestGroupModeFromNodeLabel: with --groups-node-label, a node labelled
// exclusive publishes a group per PCIe root (8 on a p5) and no single EFA,
// whatever --groups says; when the label changes the plugin stops, saying
// so, for the kubelet to start it again in the new mode; a node without
// the label publishes in --groups.
func TestGroupModeFromNodeLabel(t *testing.T) {
	t.Parallel()
	client, n, ready, srv := serveLabelled(t, "exclusive", resources.GroupsNone)
	select {
	case <-ready:
	case <-srv.done:
		t.Fatalf("plugin stopped: %v", srv.err)
	}
	require.Eventually(t, func() bool { s, g := published(t, client); return s == 0 && g == 8 }, 10*time.Second, 20*time.Millisecond,
		"exclusive: 8 groups, no single EFA")

	n.Labels[groupsLabel] = "none"
	_, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.True(t, srv.stopped(10*time.Second), "the plugin went on in the mode the label no longer sets")
	assert.EqualError(t, srv.err, "node node-1: label efakit.io/groups now sets group mode none (was exclusive): stopping, to start again in it")

	client, _, ready, srv = serveLabelled(t, "", resources.GroupsExclusive)
	select {
	case <-ready:
	case <-srv.done:
		t.Fatalf("plugin stopped: %v", srv.err)
	}
	require.Eventually(t, func() bool { s, g := published(t, client); return s == 0 && g == 8 }, 10*time.Second, 20*time.Millisecond,
		"no label: --groups=exclusive")
}

// TestGroupModeLabelRefused: a label value that names no mode, or a mode
// the sharing flags cannot go with, stops the plugin before it publishes,
// naming the label and the value.
func TestGroupModeLabelRefused(t *testing.T) {
	t.Parallel()
	client, _, _, srv := serveLabelled(t, "Exclusive", resources.GroupsNone)
	require.True(t, srv.stopped(10*time.Second), "the plugin started in a mode nobody chose")
	assert.EqualError(t, srv.err, `node node-1: node label efakit.io/groups: unknown group mode "Exclusive" (none, exclusive, mixed)`)
	s, g := published(t, client)
	assert.Zero(t, s+g, "nothing published")
}
