// Package host reads the machine-wide facts of a sysfs root: the EC2
// instance type (DMI product name) and the NUMA nodes with their CPUs,
// distances and sockets.
package host

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// nodeDir lists the NUMA nodes.
const nodeDir = "devices/system/node"

// Info is what the host says of itself.
type Info struct {
	// InstanceType is the DMI product name ("p5.48xlarge"); "" when the
	// file is absent (not EC2, or a container without DMI) or damaged
	// (not printable text).
	InstanceType string
	// NUMANodes are the nodes of devices/system/node, by ID; empty on a
	// kernel without NUMA.
	NUMANodes []NUMANode
}

// NUMANode is devices/system/node/node<ID>. A file that is missing or does
// not parse leaves its field unknown, with an error.
type NUMANode struct {
	ID        int
	CPUs      pcie.CPUList // cpulist; nil when unknown
	Distances []int        // distance: the SLIT row, indexed by node ID; nil when unknown
	// Socket is physical_package_id of the node's first CPU
	// (devices/system/cpu/cpu<N>/topology/physical_package_id), -1 when
	// unknown (also when the node's CPUs are).
	Socket int
}

// nodeName names a NUMA node in an error (sysfs.Error.Device).
func nodeName(id int) string { return "node " + strconv.Itoa(id) }

// maxNodes bounds a node ID: the kernel's MAX_NUMNODES is at most 1024
// (NODES_SHIFT 10).
const maxNodes = 1024

// parseNodeID parses the ID of a node directory's name, node<ID>: decimal,
// no sign or leading zero, below maxNodes. ok is false for a name that is
// not node<digits> (online, possible, has_cpu...).
func parseNodeID(name string) (id int, ok bool, err error) {
	idText, isNode := strings.CutPrefix(name, "node")
	if !isNode || idText == "" || strings.TrimLeft(idText, "0123456789") != "" {
		return 0, false, nil
	}
	id, aerr := strconv.Atoi(idText)
	if aerr != nil || id >= maxNodes || idText[0] == '0' && idText != "0" {
		return 0, false, fmt.Errorf("%q is not node<ID> with an ID of 0-%d", clip(name), maxNodes-1)
	}
	return id, true, nil
}

// Node returns the node with the given ID, or nil.
func (i *Info) Node(id int) *NUMANode {
	if i == nil {
		return nil
	}
	for k := range i.NUMANodes {
		if i.NUMANodes[k].ID == id {
			return &i.NUMANodes[k]
		}
	}
	return nil
}

// Distance returns the SLIT distance between two nodes, or -1 when either
// is unknown.
func (i *Info) Distance(a, b int) int {
	n := i.Node(a)
	if n == nil || b < 0 || b >= len(n.Distances) {
		return -1
	}
	return n.Distances[b]
}

// Read reads the instance type and the NUMA nodes. Missing files are not
// errors (many machines have no DMI or no NUMA); damaged ones are, and the
// rest is still read.
func Read(fsys fs.FS) (*Info, error) {
	r := sysread.New(fsys)
	info := &Info{}
	var errs []error
	switch s, err := r.ReadString(sysattr.DMIProductName); {
	case err == nil:
		// Printed by `efakit topo` and matched against the Neuron tables:
		// text that cannot be printed stays unknown.
		if err := names.CheckText(s); err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "host", File: sysattr.DMIProductName, Err: err})
		} else {
			info.InstanceType = s
		}
	case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
	default:
		errs = append(errs, &sysfs.Error{Subsystem: "host", File: sysattr.DMIProductName, Err: fserr.Cause(err)})
	}

	ents, err := r.ReadDir(nodeDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, &sysfs.Error{Subsystem: "host", File: nodeDir, Err: fserr.Cause(err)})
		}
		return info, errors.Join(errs...)
	}
	for _, e := range ents {
		id, ok, err := parseNodeID(e.Name())
		if err == nil && !ok {
			// Not a node (online, possible...); a name that cannot be
			// printed is reported, never printed raw.
			err = names.CheckName(e.Name())
		}
		if err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "host", File: nodeDir, Err: fmt.Errorf("node left out: %w", err)})
			continue
		}
		if !ok {
			continue
		}
		n := NUMANode{ID: id, Socket: -1}
		dir := nodeDir + "/" + e.Name()
		// Every node has these two files: a missing one is an error too.
		// A value that does not parse stays unknown (nil), with the error.
		read := func(f string, parse func(string) error) {
			s, err := r.ReadString(f)
			if err == nil {
				err = parse(s)
			}
			if err != nil {
				errs = append(errs, &sysfs.Error{Subsystem: "host", Device: nodeName(id), File: f, Err: fserr.Cause(err)})
			}
		}
		read(dir+"/cpulist", func(s string) error {
			c, err := pcie.ParseCPUList(s)
			if err == nil {
				n.CPUs = c
			}
			return err
		})
		read(dir+"/distance", func(s string) error {
			d, err := parseDistances(s)
			if err == nil {
				n.Distances = d
			}
			return err
		})
		if len(n.CPUs) > 0 {
			f := fmt.Sprintf("devices/system/cpu/cpu%d/topology/physical_package_id", n.CPUs[0])
			switch s, err := r.ReadString(f); {
			case err == nil:
				if v, perr := parseSocket(s); perr == nil {
					n.Socket = v
				} else {
					errs = append(errs, &sysfs.Error{Subsystem: "host", Device: nodeName(id), File: f, Err: perr})
				}
			case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
			default:
				errs = append(errs, &sysfs.Error{Subsystem: "host", Device: nodeName(id), File: f, Err: fserr.Cause(err)})
			}
		}
		info.NUMANodes = append(info.NUMANodes, n)
	}
	slices.SortFunc(info.NUMANodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return info, errors.Join(errs...)
}

// parseSocket parses a CPU's physical_package_id, "0".
func parseSocket(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a socket number", clip(s))
	}
	return v, nil
}

// parseDistances parses a node's distance file, "10 32".
func parseDistances(s string) ([]int, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > 1024 {
		return nil, fmt.Errorf("%q is not a distance row", clip(s))
	}
	out := make([]int, len(fields))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || v > 255 {
			return nil, fmt.Errorf("%q is not a distance row", clip(s))
		}
		out[i] = v
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
