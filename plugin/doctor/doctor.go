// Package doctor checks what makes EFAs work, on a node or inside a pod:
// the kernel modules, the EFAs and their uverbs nodes, what libfabric will
// see and open, the RDMA namespace mode, memlock, a pod's libfabric
// environment and device metadata, the EFAs a container holds beyond its
// claims, AWS's EFA device plugin and a second publisher of the DRA driver
// name, and the CDI spec directory.
//
// Run returns a typed Report: one Check per question, each with a status,
// the facts found and, when it did not pass, the fix. It never prints; the
// efakit doctor command does.
//
// Every fact comes through Options: the sysfs root as an fs.FS, /dev, /proc
// and the other directories as plain paths, the kernel's RDMA namespace mode
// through an live.Live, the API through an API. What cannot be
// faked on disk (opening a device, the process's memlock limit, the
// environment) has a seam of its own, so that the tests run anywhere.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/live"
)

// Status is the outcome of one check.
type Status string

// The statuses, from good to bad; Skip says the check could not run here
// and why.
const (
	Pass Status = "pass"
	Skip Status = "skip"
	Warn Status = "warn"
	Fail Status = "fail"
)

// severity orders statuses for combining the parts of one check: a part
// that failed outweighs one that warned, which outweighs a pass; a skipped
// part counts only when nothing else ran.
func (s Status) severity() int {
	switch s {
	case Pass:
		return 1
	case Warn:
		return 2
	case Fail:
		return 3
	}
	return 0
}

// CheckID is a check's stable short name, the same in text and JSON.
type CheckID string

// The checks, in the order Run reports them.
const (
	CheckKernelModules       CheckID = "kernel-modules"
	CheckEFADevices          CheckID = "efa-devices"
	CheckPCIeLinks           CheckID = "pcie-links"
	CheckGPUDirect           CheckID = "gpudirect"
	CheckUverbsNodes         CheckID = "uverbs-nodes"
	CheckLibfabricVisibility CheckID = "libfabric-visibility"
	CheckRDMANetns           CheckID = "rdma-netns"
	CheckMemlock             CheckID = "memlock"
	CheckEnvironment         CheckID = "environment"
	CheckDeviceMetadata      CheckID = "device-metadata"
	CheckUnclaimedDevices    CheckID = "unclaimed-devices"
	CheckDevicePlugin        CheckID = "device-plugin"
	CheckDRADriver           CheckID = "dra-driver"
	CheckCDI                 CheckID = "cdi"
	CheckFallback            CheckID = "fallback"
)

// Check is the outcome of one check.
type Check struct {
	ID     CheckID `json:"id"`
	Status Status  `json:"status"`
	// Message is one line with the facts found: names, counts, values.
	Message string `json:"message"`
	// Fix says what to do; empty when the check passed or was skipped.
	Fix string `json:"fix,omitempty"`
}

// Place is where the doctor runs: on a node, or inside a pod's container.
// Some checks only mean something in one of the two.
type Place string

// The places.
const (
	OnNode Place = "node"
	InPod  Place = "pod"
)

// Report is what Run found: every check, in a fixed order.
type Report struct {
	Place  Place   `json:"place"`
	Checks []Check `json:"checks"`
}

// Failed reports whether any check failed (warnings do not count).
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Check returns the check with the given ID.
func (r *Report) Check(id CheckID) (Check, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return Check{}, false
}

// Options say where the doctor looks. Empty fields take the defaults
// named on each; only Sysfs is required.
type Options struct {
	// Sysfs is the sysfs root: sysfs.Open("/sys") on the live machine, or
	// a capture.
	Sysfs fs.ReadLinkFS
	// DevDir is where /dev/infiniband/uverbsN nodes are looked for
	// ("/dev").
	DevDir string
	// ProcDir is the proc file system ("/proc"): on a node, the container
	// runtime's memlock limit is read from <ProcDir>/<pid>/limits; in a pod,
	// the container's mounts and capabilities from <ProcDir>/self/mountinfo
	// and <ProcDir>/self/status.
	ProcDir string
	// CDIRoot is the CDI spec directory the runtime reads ("/var/run/cdi").
	CDIRoot string
	// KubeletDir is the kubelet's root directory ("/var/lib/kubelet"), for
	// its device-plugins/ and plugins_registry/ directories.
	KubeletDir string
	// MetadataDir is where a container finds DRA device metadata
	// (metadata.ContainerDir, /var/run/kubernetes.io/dra-device-attributes).
	MetadataDir string
	// DriverName is the DRA driver name efakit publishes under (dra.net).
	DriverName string
	// NodeName is the Kubernetes node to ask the API about; the API
	// checks skip without it.
	NodeName string
	// Place is where the doctor runs; empty means DetectPlace.
	Place Place
	// Client is the API; nil skips the API halves of the device-plugin
	// and dra-driver checks, saying NoClientReason.
	Client         API
	NoClientReason string
	// Live gives the kernel's RDMA namespace mode (live.Kernel{}).
	Live live.Live
	// Open opens a uverbs node read-write and closes it again; an error
	// means this process cannot use the device (OpenReadWrite).
	Open func(path string) error
	// Memlock returns this process's RLIMIT_MEMLOCK (GetMemlock).
	Memlock func() (unix.Rlimit, error)
	// Environ is this process's environment, "NAME=value" each; nil means
	// os.Environ() (give an empty, non-nil slice for none).
	Environ []string
	// Files is this process's file system from "/", where the dynamic
	// loader finds NCCL's network plugin (os.DirFS("/") when nil).
	Files fs.FS
}

// API is what the doctor reads from the Kubernetes API: a Node, and the
// ResourceSlices of a driver on a node. The efakit command answers it over
// HTTP, so the CLI links no Kubernetes client; tests use a fake clientset.
type API interface {
	Node(ctx context.Context, name string) (*corev1.Node, error)
	ResourceSlices(ctx context.Context, driverName, node string) ([]resourceapi.ResourceSlice, error)
}

// withDefaults fills the empty fields.
func (o Options) withDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.DevDir, "/dev")
	def(&o.ProcDir, "/proc")
	def(&o.CDIRoot, "/var/run/cdi")
	def(&o.KubeletDir, "/var/lib/kubelet")
	def(&o.MetadataDir, metadata.ContainerDir)
	def(&o.DriverName, resources.DefaultDriverName)
	if o.Live == nil {
		o.Live = live.Kernel{}
	}
	if o.Open == nil {
		o.Open = OpenReadWrite
	}
	if o.Memlock == nil {
		o.Memlock = GetMemlock
	}
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Files == nil {
		o.Files = os.DirFS("/")
	}
	if o.Place == "" {
		o.Place = DetectPlace(o.MetadataDir, o.Environ)
	}
	return o
}

// DetectPlace says whether this process runs in a pod: the device metadata
// directory exists (the kubelet mounts it into containers with claims), or
// the environment holds KUBERNETES_SERVICE_HOST, which the kubelet sets in
// every container.
func DetectPlace(metadataDir string, environ []string) Place {
	if fi, err := os.Stat(metadataDir); err == nil && fi.IsDir() {
		return InPod
	}
	if envMap(environ)["KUBERNETES_SERVICE_HOST"] != "" {
		return InPod
	}
	return OnNode
}

// OpenReadWrite opens path read-write, as libibverbs opens a uverbs node,
// and closes it again.
func OpenReadWrite(path string) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return unix.Close(fd)
}

// GetMemlock returns this process's RLIMIT_MEMLOCK.
func GetMemlock() (unix.Rlimit, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		return r, fmt.Errorf("getrlimit RLIMIT_MEMLOCK: %w", err)
	}
	return r, nil
}

// Run runs every check and returns the report. It returns an error only
// for options it cannot run with; whatever a check cannot find is part of
// the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Sysfs == nil {
		return nil, errors.New("doctor: no sysfs root")
	}
	o = o.withDefaults()
	f := gather(ctx, o)
	rep := &Report{Place: o.Place}
	rep.Checks = []Check{
		f.kernelModules(),
		f.efaDevices(),
		f.pcieLinks(),
		f.gpuDirect(),
		f.uverbsNodes(),
		f.libfabricVisibility(),
		f.rdmaNetns(),
		f.memlock(),
		f.environment(),
		f.fallback(),
		f.deviceMetadata(),
		f.unclaimedDevices(),
		f.devicePlugin(),
		f.draDriver(),
		f.cdi(),
	}
	return rep, nil
}

// part is one finding of a check; a check with several parts reports the
// worst status, every message and every fix.
type part struct {
	status  Status
	message string
	fix     string
}

// combine makes one check out of its parts, in order.
func combine(id CheckID, parts ...part) Check {
	c := Check{ID: id, Status: Skip}
	var msgs, fixes []string
	for _, p := range parts {
		if p.status.severity() > c.Status.severity() {
			c.Status = p.status
		}
	}
	for _, p := range parts {
		if p.message != "" {
			msgs = append(msgs, p.message)
		}
		if p.fix != "" && p.status != Pass && p.status != Skip && !containsString(fixes, p.fix) {
			fixes = append(fixes, p.fix)
		}
	}
	c.Message = strings.Join(msgs, "; ")
	c.Fix = strings.Join(fixes, "; ")
	return c
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// envMap turns "NAME=value" entries into a map. A repeated name keeps its
// first value, the one getenv(3) (and so libfabric) reads.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, e := range environ {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			continue
		}
		if _, seen := m[k]; !seen {
			m[k] = v
		}
	}
	return m
}

// listNames joins names, the first max of them, then says how many more.
func listNames(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// maxListed is how many names a message lists before "and N more": enough
// for a GPU's EFAs on every instance type, short enough for one line.
const maxListed = 8

// plural returns "1 EFA" or "2 EFAs".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
