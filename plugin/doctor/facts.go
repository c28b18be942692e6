package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// facts is what several checks judge, gathered once: the EFAs of sysfs,
// every uverbs device and what became of its node here, the pod's device
// metadata and the API's Node.
type facts struct {
	ctx context.Context
	o   Options
	env map[string]string
	// sysfs reads what efa.Scan does not: module/ and
	// class/infiniband_verbs/.
	sysfs *sysread.Reader

	efas     []*efa.Device
	gpus     []*pcie.Device // NVIDIA GPUs of the PCI tree
	inactive []*pcie.Device
	scanErrs []error // efa.Scan's, one per damaged device or file
	// tree and efaRes are efa.Scan's, for the GPUDirect judgement.
	tree   *pcie.Tree
	efaRes *efa.Result

	verbs     []*verbsDevice // every uverbs device of sysfs, by number
	verbsErrs []error

	// meta is the pod's device metadata; nil on a node.
	meta *metadataFacts

	// node is the API's Node, or nil with apiSkip saying why.
	node    *corev1.Node
	apiSkip string
}

// verbsDevice is one uverbs device of sysfs (class/infiniband_verbs/uverbsN)
// and what became of its node under DevDir.
type verbsDevice struct {
	Name         string // uverbs3
	Number       int    // 3
	RDMA         string // the RDMA device: class/infiniband_verbs/uverbsN/ibdev
	EFA          bool   // whether the RDMA device is one of the EFAs
	Major, Minor uint32 // class/infiniband_verbs/uverbsN/dev
	Path         string // <DevDir>/infiniband/uverbs3
	Node         nodeProbe
}

// nodeState is what a uverbs device's node is here.
type nodeState int

const (
	nodeOpenable      nodeState = iota
	nodeAbsent                  // no such path: not given to this container
	nodeNotCharDevice           // something else at the path
	nodeWrongNumber             // a character device of another number
	nodeStatFailed              // the path could not be examined
	nodeOpenFailed              // the right node, but open(2) refused
)

// nodeProbe is the outcome of examining one node.
type nodeProbe struct {
	State        nodeState
	Kind         string // for nodeNotCharDevice: what is there instead
	Major, Minor uint32 // for nodeWrongNumber: the node's number
	Err          error  // for nodeStatFailed and nodeOpenFailed
}

// gather reads everything the checks share.
func gather(ctx context.Context, o Options) *facts {
	f := &facts{ctx: ctx, o: o, env: envMap(o.Environ), sysfs: sysread.New(o.Sysfs)}
	tree, res, err := efa.Scan(o.Sysfs)
	f.tree, f.efaRes = tree, res
	if res != nil {
		f.efas, f.inactive = res.EFAs, res.Inactive
	}
	if tree != nil {
		for _, d := range tree.Devices {
			if topology.IsGPU(d) {
				f.gpus = append(f.gpus, d)
			}
		}
	}
	f.scanErrs = flatten(err)
	f.readVerbs()
	for _, v := range f.verbs {
		v.Node = probeNode(v.Path, v.Major, v.Minor, o.Open)
	}
	if o.Place == InPod {
		f.meta = readMetadata(o.MetadataDir, o.DriverName)
	}
	f.readNode()
	return f
}

// flatten lists the errors an errors.Join holds, recursively.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	// Only a join itself is split: an error that wraps a join is one error.
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// verbsClass is the class directory of every uverbs device, EFA or not.
const verbsClass = "class/infiniband_verbs"

// readVerbs lists every uverbs device of sysfs with its RDMA device and
// number: an EFA's from the scan, which read them already; any other's
// (mlx5, say) from its class directory. The class directory also holds
// abi_version, which is no device.
func (f *facts) readVerbs() {
	ents, err := f.sysfs.ReadDir(verbsClass)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, sysfs.ErrDanglingLink) {
			f.verbsErrs = append(f.verbsErrs, fmt.Errorf("%s: %w", verbsClass, fserr.Cause(err)))
		}
		return
	}
	scanned := make(map[string]*efa.Device, len(f.efas)) // by uverbs name
	efaNames := make(map[string]bool, len(f.efas))
	for _, d := range f.efas {
		efaNames[d.Name] = true
		if d.Verbs != nil {
			scanned[d.Verbs.Name] = d
		}
	}
	for _, e := range ents {
		n, ok := uverbsNumber(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(f.o.DevDir, "infiniband", e.Name())
		if d, ok := scanned[e.Name()]; ok {
			f.verbs = append(f.verbs, &verbsDevice{Name: e.Name(), Number: n, RDMA: d.Name, EFA: true,
				Major: d.Verbs.Major, Minor: d.Verbs.Minor, Path: path})
			continue
		}
		dir := verbsClass + "/" + e.Name()
		ibdev, err := f.sysfs.ReadString(dir + "/ibdev")
		if err != nil {
			f.verbsErrs = append(f.verbsErrs, fmt.Errorf("%s/ibdev: %w", dir, fserr.Cause(err)))
			continue
		}
		// The name is printed in the report: one that is no printable
		// word could forge its lines.
		if err := names.CheckName(ibdev); err != nil {
			f.verbsErrs = append(f.verbsErrs, fmt.Errorf("%s/ibdev: %w", dir, err))
			continue
		}
		dev, err := f.sysfs.ReadString(dir + "/dev")
		var major, minor uint32
		if err == nil {
			major, minor, err = sysattr.ParseDevNumber(dev)
		}
		if err != nil {
			f.verbsErrs = append(f.verbsErrs, fmt.Errorf("%s/dev: %w", dir, fserr.Cause(err)))
			continue
		}
		f.verbs = append(f.verbs, &verbsDevice{Name: e.Name(), Number: n, RDMA: ibdev, EFA: efaNames[ibdev], Major: major, Minor: minor, Path: path})
	}
	slices.SortFunc(f.verbs, func(a, b *verbsDevice) int { return a.Number - b.Number })
}

// uverbsNumber parses "uverbs3" into 3.
func uverbsNumber(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "uverbs")
	if !ok || s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// probeNode examines the node at path with real file system calls, and
// opens it through open only when it is the character device sysfs names.
func probeNode(path string, major, minor uint32, open func(string) error) nodeProbe {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nodeProbe{State: nodeAbsent}
	case err != nil:
		return nodeProbe{State: nodeStatFailed, Err: err}
	}
	if fi.Mode().Type() != fs.ModeDevice|fs.ModeCharDevice {
		return nodeProbe{State: nodeNotCharDevice, Kind: fserr.TypeName(fi.Mode())}
	}
	if ma, mi, ok := deviceNumber(fi); ok && (ma != major || mi != minor) {
		return nodeProbe{State: nodeWrongNumber, Major: ma, Minor: mi}
	}
	if err := open(path); err != nil {
		return nodeProbe{State: nodeOpenFailed, Err: err}
	}
	return nodeProbe{State: nodeOpenable}
}

// openable returns the uverbs devices whose node this process can open;
// efaOnly keeps the EFAs alone.
func (f *facts) openable(efaOnly bool) []*verbsDevice {
	var out []*verbsDevice
	for _, v := range f.verbs {
		if v.Node.State == nodeOpenable && (v.EFA || !efaOnly) {
			out = append(out, v)
		}
	}
	return out
}

// verbsOf returns the uverbs device of an RDMA device, or nil.
func (f *facts) verbsOf(rdma string) *verbsDevice {
	for _, v := range f.verbs {
		if v.RDMA == rdma {
			return v
		}
	}
	return nil
}

// readNode gets the Node from the API, once, for the device-plugin and
// dra-driver checks.
func (f *facts) readNode() {
	switch {
	case f.o.Client == nil:
		reason := f.o.NoClientReason
		if reason == "" {
			reason = "no API client"
		}
		f.apiSkip = "API not consulted: " + reason
	case f.o.NodeName == "":
		f.apiSkip = "API not consulted: no node name (--node or NODE_NAME)"
	default:
		n, err := f.o.Client.Node(f.ctx, f.o.NodeName)
		if err != nil {
			f.apiSkip = fmt.Sprintf("API not consulted: reading node %s: %v", f.o.NodeName, err)
			return
		}
		f.node = n
	}
}

// rdmaNames lists the RDMA names of uverbs devices.
func rdmaNames(vs []*verbsDevice) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.RDMA
	}
	return out
}

// uverbsRanges prints the names of uverbs devices with runs of numbers
// folded: "uverbs0-uverbs3, uverbs8".
func uverbsRanges(vs []*verbsDevice) string {
	nums := make([]int, len(vs))
	for i, v := range vs {
		nums[i] = v.Number
	}
	slices.Sort(nums)
	var parts []string
	for i := 0; i < len(nums); {
		j := i
		for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprintf("uverbs%d", nums[i]))
		} else {
			parts = append(parts, fmt.Sprintf("uverbs%d-uverbs%d", nums[i], nums[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// deviceNumber returns a device file's major and minor number.
func deviceNumber(fi fs.FileInfo) (major, minor uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	rdev := uint64(st.Rdev) // an int32 on some systems
	return unix.Major(rdev), unix.Minor(rdev), true
}
