//go:build rdmaguest

// The tests inside the RDMA kernel VM (TestRDMAKernel boots it and runs
// them): root, Debian's 6.1 kernel, two soft-RoCE devices (rxe0 on the
// dummy netdev d0, rxe1 on d1), the host's binaries over its root.

package rdmakernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/uevent"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/doctor"
	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/owners"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/driver/uevents"
	"github.com/efakit/efakit/rdmans"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

func TestMain(m *testing.M) {
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if !strings.Contains(string(cmdline), "efakit.run=") {
		fmt.Fprintln(os.Stderr, "these tests run inside the RDMA kernel VM: make rdma-kernel")
		os.Exit(2)
	}
	for _, c := range [][]string{
		{"ip", "link", "add", "d0", "type", "dummy"}, {"ip", "link", "set", "d0", "up"},
		{"ip", "addr", "add", "10.77.0.1/24", "dev", "d0"},
		{"ip", "link", "add", "d1", "type", "dummy"}, {"ip", "link", "set", "d1", "up"},
		{"rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "d0"},
		{"rdma", "link", "add", "rxe1", "type", "rxe", "netdev", "d1"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v: %s\n", strings.Join(c, " "), err, out)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// run runs a command and returns its output, failing the test when it
// fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

// uverbsOf is the uverbs device the kernel gave an RDMA device, read from
// the kernel's class directory.
func uverbsOf(t *testing.T, ibdev string) (name string, major, minor uint32) {
	t.Helper()
	ents, err := os.ReadDir("/sys/class/infiniband_verbs")
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile("/sys/class/infiniband_verbs/" + e.Name() + "/ibdev")
		if err != nil || strings.TrimSpace(string(b)) != ibdev {
			continue
		}
		dev, err := os.ReadFile("/sys/class/infiniband_verbs/" + e.Name() + "/dev")
		require.NoError(t, err)
		_, err = fmt.Sscanf(strings.TrimSpace(string(dev)), "%d:%d", &major, &minor)
		require.NoError(t, err)
		return e.Name(), major, minor
	}
	t.Fatalf("no uverbs device of %s", ibdev)
	return
}

// TestLiveSysfs: the library on the kernel's own /sys. The rxe devices are
// RDMA devices of no PCI function: no EFA, no error. Their port state
// and hardware counters are the kernel's, read by the library's readers,
// and the counters move with real RDMA traffic.
func TestLiveSysfs(t *testing.T) {
	live := os.DirFS("/sys")
	tree, res, err := efa.Scan(live)
	require.NoError(t, err, "scanning a machine with RDMA devices and no EFA")
	assert.NotEmpty(t, tree.Devices, "qemu's PCI functions")
	assert.Empty(t, res.EFAs)
	assert.Empty(t, res.Inactive)
	topo, err := topology.Scan(live)
	require.NoError(t, err)
	assert.Empty(t, topo.Of(topology.KindEFA))
	assert.Len(t, topo.Host.NUMANodes, 1, "one NUMA node")

	// rxe0 as an efa.Device: its RDMA directory and port.
	link, err := os.Readlink("/sys/class/infiniband/rxe0")
	require.NoError(t, err)
	rxe := &efa.Device{Name: "rxe0", IBPath: filepath.Clean(filepath.Join("class/infiniband", link)), Ports: []efa.Port{{Number: 1}}}
	assert.Equal(t, "devices/virtual/infiniband/rxe0", rxe.IBPath)
	pl, err := rxe.ReadPortLink(live, 1)
	require.NoError(t, err)
	assert.Equal(t, efa.PortLink{State: "ACTIVE", StateOK: true, RateGbps: 2.5, RateOK: true}, pl, "ports/1/state %q, rate %q", readFile(t, "/sys/class/infiniband/rxe0/ports/1/state"), readFile(t, "/sys/class/infiniband/rxe0/ports/1/rate"))

	before, err := rxe.ReadCounters(live)
	require.NoError(t, err)
	require.Contains(t, before.Ports, 1)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range before.Ports[1] {
			if !yield(k) {
				return
			}
		}
	})
	var files []string
	for _, e := range mustReadDir(t, "/sys/class/infiniband/rxe0/ports/1/hw_counters") {
		if e.Name() != "lifespan" { // the kernel's refresh interval, no counter
			files = append(files, e.Name())
		}
	}
	assert.Equal(t, files, names, "every counter file read")
	assert.Contains(t, names, "sent_pkts")
	assert.Contains(t, names, "rcvd_pkts")

	// RDMA traffic over rxe0: ibv_rc_pingpong's server and client on it,
	// the connection set up over loopback TCP; each of the 20 round trips
	// sends and receives a packet at least.
	const iters = 20
	srv := exec.Command("ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", strconv.Itoa(iters))
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	require.NoError(t, srv.Start())
	var cli []byte
	require.Eventually(t, func() bool {
		cli, err = exec.Command("ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", strconv.Itoa(iters), "127.0.0.1").CombinedOutput()
		return err == nil
	}, 30*time.Second, 300*time.Millisecond, "ibv_rc_pingpong's client: %v\n%s", err, cli)
	require.NoError(t, srv.Wait(), "ibv_rc_pingpong's server:\n%s", srvOut.String())
	t.Logf("ibv_rc_pingpong on rxe0: %s", strings.TrimSpace(string(cli)))
	after, err := rxe.ReadCounters(live)
	require.NoError(t, err)
	for _, c := range []string{"sent_pkts", "rcvd_pkts"} {
		assert.GreaterOrEqual(t, after.Ports[1][c]-before.Ports[1][c], uint64(2*iters), "%s advanced by the traffic (%d, then %d)", c, before.Ports[1][c], after.Ports[1][c])
	}

	// The uverbs devices: the library's number and path are the node
	// devtmpfs made.
	for _, ib := range []string{"rxe0", "rxe1"} {
		name, major, minor := uverbsOf(t, ib)
		v := efa.Verbs{Name: name, Major: major, Minor: minor}
		var st unix.Stat_t
		require.NoError(t, unix.Stat(v.DevicePath(), &st), ib)
		assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT, "%s is a character device", v.DevicePath())
		assert.Equal(t, v.Dev(), st.Rdev, "%s: the library's device number is the node's", v.DevicePath())
	}

	// efakit snapshot of the live tree, replayed: the same answers.
	capture := filepath.Join(t.TempDir(), "vm.sysfs")
	run(t, "efakit", "snapshot", "--no-scrub", "-o", capture)
	for _, cmd := range [][]string{{"list", "-o", "json"}, {"topo", "-o", "json"}} {
		liveOut := run(t, "efakit", cmd...)
		replay := run(t, "efakit", append(cmd, "--sysfs", capture)...)
		assert.JSONEq(t, liveOut, replay, "efakit %s: the live tree and its capture", strings.Join(cmd, " "))
	}
	// doctor reads every RDMA device's uverbs device: the capture holds
	// the virtual ones too.
	doctorLive := doctorOnNode(t)
	out, _ := exec.Command("efakit", "doctor", "--place", "node", "-o", "json", "--sysfs", capture).Output()
	fromCaptureDoctor := doctorReport(t, string(out))
	// A capture holds no module/: that check says so, and differs.
	assert.Contains(t, fromCaptureDoctor[doctor.CheckKernelModules].Message, "a capture without module/")
	delete(doctorLive, doctor.CheckKernelModules)
	delete(fromCaptureDoctor, doctor.CheckKernelModules)
	assert.Equal(t, doctorLive, fromCaptureDoctor, "efakit doctor: the live tree and its capture")
	root, err := sysfs.Open(capture)
	require.NoError(t, err)
	defer root.Close()
	fromCapture, err := rxe.ReadCounters(root)
	require.NoError(t, err)
	assert.ElementsMatch(t, names, keys(fromCapture.Ports[1]), "the capture holds rxe0's counters")
	pl2, err := rxe.ReadPortLink(root, 1)
	require.NoError(t, err)
	assert.Equal(t, pl, pl2, "the capture holds rxe0's port")
}

// section is what a "set -x" script printed after the command that
// starts with cmd, up to the next command.
func section(out, cmd string) string {
	var got []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "+ ") {
			if in {
				break
			}
			in = l == "+ "+cmd || strings.HasPrefix(l, "+ "+cmd+" ")
			continue
		}
		if in {
			got = append(got, l)
		}
	}
	return strings.TrimSpace(strings.Join(got, "\n"))
}

func keys(m map[string]uint64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func mustReadDir(t *testing.T, name string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(name)
	require.NoError(t, err)
	return ents
}

// kernelMode answers the plugin's stand-aside check from the running
// kernel, as the daemon's live.Kernel does.
type kernelMode struct{}

func (kernelMode) RDMANetnsMode() (rdmans.Mode, error) { return rdmans.Read() }

// setNetns switches the kernel's RDMA namespace mode over netlink. The
// kernel refuses (EBUSY) while any network namespace besides the initial
// one exists: a container's must be gone.
func setNetns(t *testing.T, mode rdmans.Mode) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		err = netlink.RdmaSystemSetNetnsMode(string(mode))
		return err == nil
	}, 20*time.Second, 200*time.Millisecond, "rdma system set netns %s: %v", mode, err)
}

// doctorReport reads efakit doctor's JSON report, the first in out, and
// returns its checks by ID.
func doctorReport(t *testing.T, out string) map[doctor.CheckID]doctor.Check {
	t.Helper()
	i := strings.Index(out, "{")
	require.GreaterOrEqual(t, i, 0, "no report in:\n%s", out)
	var rep doctor.Report
	require.NoError(t, json.NewDecoder(strings.NewReader(out[i:])).Decode(&rep), out)
	m := map[doctor.CheckID]doctor.Check{}
	for _, c := range rep.Checks {
		m[c.ID] = c
	}
	return m
}

// doctorOnNode runs efakit doctor on the node.
func doctorOnNode(t *testing.T) map[doctor.CheckID]doctor.Check {
	t.Helper()
	out, _ := exec.Command("efakit", "doctor", "--place", "node", "-o", "json").Output() // fails: no EFA
	return doctorReport(t, string(out))
}

// TestNetnsMode: the RDMA namespace mode read over netlink from the
// kernel in both modes, and what the plugin and doctor decide in each.
func TestNetnsMode(t *testing.T) {
	mode, err := rdmans.Read()
	require.NoError(t, err)
	assert.Equal(t, rdmans.Shared, mode, "the kernel's default")
	check := owners.Netns(kernelMode{})
	v, err := check(context.Background())
	require.NoError(t, err)
	assert.Empty(t, v.Reason, "the plugin publishes in the shared mode")
	d := doctorOnNode(t)
	assert.Equal(t, doctor.Pass, d[doctor.CheckRDMANetns].Status, "%+v", d[doctor.CheckRDMANetns])
	assert.Equal(t, doctor.Pass, d[doctor.CheckUverbsNodes].Status, "%+v", d[doctor.CheckUverbsNodes])
	assert.Contains(t, d[doctor.CheckUverbsNodes].Message, "2 of 2 RDMA devices openable")

	setNetns(t, rdmans.Exclusive)
	defer setNetns(t, rdmans.Shared)
	mode, err = rdmans.Read()
	require.NoError(t, err)
	assert.Equal(t, rdmans.Exclusive, mode)
	assert.Contains(t, run(t, "rdma", "system"), "netns exclusive", "iproute2 agrees")
	v, err = check(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "netns", v.Key, "the plugin stands aside in the exclusive mode")
	assert.Contains(t, v.Reason, "exclusive")
	d = doctorOnNode(t)
	assert.Equal(t, doctor.Fail, d[doctor.CheckRDMANetns].Status, "%+v", d[doctor.CheckRDMANetns])
	assert.Equal(t, "rdma system set netns shared", d[doctor.CheckRDMANetns].Fix)

	// No driver without disassociate_ucontext moves its device into
	// another namespace: rxe does not, nor does efa.
	run(t, "ip", "netns", "add", "moved")
	out, err := exec.Command("rdma", "dev", "set", "rxe0", "netns", "moved").CombinedOutput()
	run(t, "ip", "netns", "del", "moved")
	assert.Error(t, err, "rxe0 moved:\n%s", out)
	assert.Contains(t, string(out), "Operation not supported")
}

// recorder passes the kernel's uevents on to the plugin's watcher and
// keeps them.
type recorder struct {
	uevents.Source
	mu   sync.Mutex
	seen []uevent.Event
}

func (r *recorder) Receive() (uevent.Event, error) {
	ev, err := r.Source.Receive()
	if err == nil {
		r.mu.Lock()
		r.seen = append(r.seen, ev)
		r.mu.Unlock()
	}
	return ev, err
}

func (r *recorder) has(action, subsystem, devpath string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.seen, func(e uevent.Event) bool {
		return e.Action == action && e.Subsystem == subsystem && e.DevPath == devpath
	})
}

// TestUevents: the plugin's watcher on the kernel's uevent socket sees
// an RDMA device and its uverbs device come and go (rdma link add, del),
// and asks for one rescan per burst; devtmpfs makes and removes the node.
func TestUevents(t *testing.T) {
	run(t, "ip", "link", "add", "d2", "type", "dummy")
	run(t, "ip", "link", "set", "d2", "up")
	t.Cleanup(func() { // whatever fails: the next test finds rxe0 and rxe1 only
		_ = exec.Command("rdma", "link", "del", "rxe2").Run()
		_ = exec.Command("ip", "link", "del", "d2").Run()
	})
	src, err := uevents.Kernel()
	require.NoError(t, err)
	rec := &recorder{Source: src}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var bursts []uevents.Burst
	done := make(chan struct{})
	go func() {
		defer close(done)
		uevents.Watch(ctx, rec, uevents.Quiet, uevents.MaxWait, func(b uevents.Burst) {
			mu.Lock()
			bursts = append(bursts, b)
			mu.Unlock()
		})
	}()
	defer func() { cancel(); <-done }()
	burstsNow := func() int { mu.Lock(); defer mu.Unlock(); return len(bursts) }

	for round := range 2 {
		before := burstsNow()
		added := time.Now()
		run(t, "rdma", "link", "add", "rxe2", "type", "rxe", "netdev", "d2")
		name, _, _ := uverbsOf(t, "rxe2")
		require.Eventually(t, func() bool {
			return rec.has("add", "infiniband", "/devices/virtual/infiniband/rxe2") &&
				rec.has("add", "infiniband_verbs", "/devices/virtual/infiniband_verbs/"+name) && burstsNow() > before
		}, 10*time.Second, 20*time.Millisecond, "round %d: the uevents of rxe2 and %s, and a rescan; seen %+v", round, name, rec.seen)
		took := time.Since(added)
		_, err := os.Stat("/dev/infiniband/" + name)
		assert.NoError(t, err, "devtmpfs made the node")
		assert.Less(t, took, time.Second+uevents.MaxWait, "the rescan within a second of the device")

		before = burstsNow()
		run(t, "rdma", "link", "del", "rxe2")
		require.Eventually(t, func() bool {
			return rec.has("remove", "infiniband", "/devices/virtual/infiniband/rxe2") &&
				rec.has("remove", "infiniband_verbs", "/devices/virtual/infiniband_verbs/"+name) && burstsNow() > before
		}, 10*time.Second, 20*time.Millisecond, "round %d: rxe2's removal and a rescan; seen %+v", round, rec.seen)
		require.Eventually(t, func() bool {
			_, err := os.Stat("/dev/infiniband/" + name)
			return errors.Is(err, fs.ErrNotExist)
		}, 5*time.Second, 20*time.Millisecond, "devtmpfs removed /dev/infiniband/%s", name)
		t.Logf("round %d: rxe2 (%s) added, seen and rescanned in %s; removed", round, name, took.Round(time.Millisecond))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bursts {
		assert.Positive(t, b.Count)
		assert.False(t, b.Lost)
	}
}

// containerd runs containerd (the e2e's build, with CDI) for the test.
func containerd(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(`version = 3
root = "`+dir+`/root"
state = "/run/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/containerd/containerd.sock"
`), 0o644))
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	require.NoError(t, err)
	cmd := exec.Command("containerd", "--config", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool {
		return exec.Command("ctr", "version").Run() == nil
	}, 60*time.Second, 200*time.Millisecond, "containerd answers")
}

// ctrRun runs a container of the guest's root (a bind mount of it) with
// the CDI devices and returns its output and whether it exited 0.
func ctrRun(t *testing.T, id string, devices []string, script string) (string, bool) {
	t.Helper()
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	require.NoError(t, os.Mkdir(rootfs, 0o755))
	require.NoError(t, unix.Mount("/", rootfs, "", unix.MS_BIND, ""))
	defer unix.Unmount(rootfs, unix.MNT_DETACH)
	args := []string{"run", "--rm", "--rootfs", "--env", "PATH=" + os.Getenv("PATH")}
	for _, d := range devices {
		args = append(args, "--device", d)
	}
	args = append(args, rootfs, id, "sh", "-c", script)
	out, err := exec.Command("ctr", args...).CombinedOutput()
	return string(out), err == nil
}

// TestContainerPath: the plugin prepares a claim for an EFA of a p5
// capture whose uverbs device is uverbs0, 231:192: here the real node of
// rxe0. containerd (with CDI) and runc give a container that node: it
// opens it with libibverbs, and cannot open rxe1's, which it was not
// given. efakit doctor in the container says so. In the exclusive mode
// the container cannot open its node (EPERM), and doctor says why.
func TestContainerPath(t *testing.T) {
	ctx := context.Background()
	name, major, minor := uverbsOf(t, "rxe0")
	require.Equal(t, []any{"uverbs0", uint32(231), uint32(192)}, []any{name, major, minor}, "rxe0 has the first uverbs device")
	other, _, _ := uverbsOf(t, "rxe1")

	capture, err := filepath.Abs("../../../testdata/sysfs/p5.48xlarge.sysfs")
	require.NoError(t, err)
	root, err := sysfs.OpenCapture(capture)
	require.NoError(t, err)
	defer root.Close()
	topo, err := topology.Scan(root)
	require.NoError(t, err)
	var efaName string
	for _, d := range topo.Of(topology.KindEFA) {
		if d.EFA.Verbs != nil && d.EFA.Verbs.Name == name && d.EFA.Verbs.Major == major && d.EFA.Verbs.Minor == minor {
			efaName = resources.DeviceName(d.PCI.Address)
		}
	}
	require.NotEmpty(t, efaName, "an EFA of the capture with %s %d:%d", name, major, minor)

	w, err := cdi.NewWriter("/var/run/cdi", resources.DefaultDriverName)
	require.NoError(t, err)
	const node = "vm"
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w,
		Store: checkpoint.NewStore(t.TempDir()), BootID: readFile(t, "/proc/sys/kernel/random/boot_id")})
	require.NoError(t, err)
	_, err = p.Rescan(ctx)
	require.NoError(t, err)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rxe", UID: types.UID("5e5e5e5e-0000-4000-8000-000000000001")}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "efa", Driver: resources.DefaultDriverName, Pool: node, Device: efaName}}}}
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	require.NoError(t, err)
	require.NoError(t, res[claim.UID].Err)
	var ids []string
	for _, d := range res[claim.UID].Devices {
		ids = append(ids, d.CDIDeviceIDs...)
	}
	require.NotEmpty(t, ids)
	t.Logf("the plugin prepared %s (%s) for the claim: CDI devices %v", efaName, name, ids)

	containerd(t)
	script := `set -x
ls /dev/infiniband
ibv_devinfo -d rxe0
ibv_devinfo -d rxe1; echo "rxe1 exit $?"
efakit doctor --place pod -o json; echo "doctor exit $?"`
	out, ok := ctrRun(t, "shared", ids, script)
	require.True(t, ok, "the container in the shared mode:\n%s", out)
	assert.Equal(t, "uverbs0", section(out, "ls /dev/infiniband"), "the one node CDI gave:\n%s", out)
	assert.Contains(t, section(out, "ibv_devinfo -d rxe0"), "hca_id:\trxe0", "libibverbs opened rxe0 through its node:\n%s", out)
	assert.Contains(t, section(out, "ibv_devinfo -d rxe0"), "PORT_ACTIVE", out)
	assert.Contains(t, out, "rxe1 exit 255", "libibverbs cannot open rxe1:\n%s", out)
	d := doctorReport(t, section(out, "efakit doctor"))
	assert.Equal(t, doctor.Pass, d[doctor.CheckUverbsNodes].Status, "%+v", d[doctor.CheckUverbsNodes])
	assert.Contains(t, d[doctor.CheckUverbsNodes].Message, "1 of 2 RDMA devices openable: uverbs0 (rxe0)")
	assert.Contains(t, d[doctor.CheckUverbsNodes].Message, other+" (not given to this container)")
	assert.Equal(t, doctor.Pass, d[doctor.CheckRDMANetns].Status, "%+v", d[doctor.CheckRDMANetns])

	// A node made inside the container for rxe1: the device cgroup
	// refuses it.
	out, ok = ctrRun(t, "mknod", ids, fmt.Sprintf(`mknod /dev/infiniband/%[1]s c 231 193 && head -c 1 /dev/infiniband/%[1]s`, other))
	assert.False(t, ok, "rxe1 opened through a node made in the container:\n%s", out)
	assert.Contains(t, out, "Operation not permitted", out)

	// The exclusive mode: the container, in its own network namespace,
	// sees no RDMA device and cannot open its node.
	setNetns(t, rdmans.Exclusive)
	defer setNetns(t, rdmans.Shared)
	out, ok = ctrRun(t, "exclusive", ids, `set -x
ls /sys/class/infiniband
ls /sys/class/infiniband_verbs
ibv_devinfo -d rxe0 && exit 1
head -c 1 /dev/infiniband/uverbs0
efakit doctor --place pod -o json; echo "doctor exit $?"`)
	assert.True(t, ok, out)
	assert.Empty(t, section(out, "ls /sys/class/infiniband"), "no RDMA device in the container's namespace:\n%s", out)
	assert.Equal(t, "abi_version\nuverbs0\nuverbs1", section(out, "ls /sys/class/infiniband_verbs"), "the uverbs class is not per namespace:\n%s", out)
	assert.Contains(t, section(out, "head -c 1 /dev/infiniband/uverbs0"), "Operation not permitted", out)
	d = doctorReport(t, section(out, "efakit doctor"))
	assert.Equal(t, doctor.Fail, d[doctor.CheckRDMANetns].Status, "%+v", d[doctor.CheckRDMANetns])
	assert.Equal(t, doctor.Fail, d[doctor.CheckUverbsNodes].Status, "%+v", d[doctor.CheckUverbsNodes])
	assert.Contains(t, d[doctor.CheckUverbsNodes].Fix, "exclusive", "doctor says why the node does not open: %+v", d[doctor.CheckUverbsNodes])
}
