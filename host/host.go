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

	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// ProductNameFile holds the DMI product name, the instance type on EC2.
const ProductNameFile = "devices/virtual/dmi/id/product_name"

// NodeDir lists the NUMA nodes.
const NodeDir = "devices/system/node"

// Info is what the host says of itself.
type Info struct {
	// InstanceType is the DMI product name ("p5.48xlarge"); "" when the
	// file is absent (not EC2, or a container without DMI).
	InstanceType string
	// NUMANodes are the nodes of devices/system/node, by ID; empty on a
	// kernel without NUMA.
	NUMANodes []NUMANode
}

// NUMANode is devices/system/node/node<ID>.
type NUMANode struct {
	ID        int
	CPUs      pcie.CPUList // cpulist
	Distances []int        // distance: the SLIT row, indexed by node ID
	// Socket is physical_package_id of the node's first CPU
	// (devices/system/cpu/cpu<N>/topology/physical_package_id), -1 when
	// unknown.
	Socket int
}

// Node returns the node with the given ID, or nil.
func (i *Info) Node(id int) *NUMANode {
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
func Read(r *sysfs.Reader) (*Info, error) {
	info := &Info{}
	var errs []error
	switch s, err := r.ReadString(ProductNameFile); {
	case err == nil:
		info.InstanceType = s
	case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
	default:
		errs = append(errs, fmt.Errorf("host: %s: %w", ProductNameFile, sysfs.Cause(err)))
	}

	ents, err := r.ReadDir(NodeDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("host: %s: %w", NodeDir, sysfs.Cause(err)))
		}
		return info, errors.Join(errs...)
	}
	for _, e := range ents {
		idText, ok := strings.CutPrefix(e.Name(), "node")
		if !ok || idText == "" || strings.TrimLeft(idText, "0123456789") != "" {
			continue
		}
		id, _ := strconv.Atoi(idText)
		n := NUMANode{ID: id, Socket: -1}
		dir := NodeDir + "/" + e.Name()
		if s, err := r.ReadString(dir + "/cpulist"); err != nil {
			errs = append(errs, fmt.Errorf("host: node %d: %s/cpulist: %w", id, dir, sysfs.Cause(err)))
		} else if n.CPUs, err = pcie.ParseCPUList(s); err != nil {
			errs = append(errs, fmt.Errorf("host: node %d: %s/cpulist: %w", id, dir, err))
		}
		if s, err := r.ReadString(dir + "/distance"); err != nil {
			errs = append(errs, fmt.Errorf("host: node %d: %s/distance: %w", id, dir, sysfs.Cause(err)))
		} else if n.Distances, err = ParseDistances(s); err != nil {
			errs = append(errs, fmt.Errorf("host: node %d: %s/distance: %w", id, dir, err))
		}
		if len(n.CPUs) > 0 {
			f := fmt.Sprintf("devices/system/cpu/cpu%d/topology/physical_package_id", n.CPUs[0])
			switch s, err := r.ReadString(f); {
			case err == nil:
				if v, perr := strconv.Atoi(s); perr == nil && v >= 0 {
					n.Socket = v
				} else {
					errs = append(errs, fmt.Errorf("host: node %d: %s: %q is not a socket number", id, f, s))
				}
			case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
			default:
				errs = append(errs, fmt.Errorf("host: node %d: %s: %w", id, f, sysfs.Cause(err)))
			}
		}
		info.NUMANodes = append(info.NUMANodes, n)
	}
	slices.SortFunc(info.NUMANodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return info, errors.Join(errs...)
}

// ParseDistances parses a node's distance file, "10 32".
func ParseDistances(s string) ([]int, error) {
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
