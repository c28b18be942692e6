package pcie

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// LinkRate is a PCIe link's rate as a function's sysfs files give it: current_link_*
// for the link as trained now, max_link_* for what the function can do.
// The kernel makes these files only for PCI Express functions
// (pcie_dev_attrs in drivers/pci/pci-sysfs.c).
type LinkRate struct {
	// Speed is the transfer rate of one lane in GT/s, 16 for "16.0 GT/s
	// PCIe"; 0 where the kernel says "Unknown" (or "Unknown speed"), or
	// the file is absent or damaged.
	Speed float64
	// Width is the number of lanes, 16 for x16, and 0 for a current link
	// that is down; UnknownWidth where the kernel does not know it (255,
	// PCIE_LNK_WIDTH_UNKNOWN), or the file is absent or damaged.
	Width int
}

// UnknownWidth is a LinkRate's Width when the lane count is unknown.
const UnknownWidth = -1

// String prints the link as lspci does, "x16 16GT/s"; an unknown half is
// "x?" or "?GT/s", a link that is down "x0".
func (l LinkRate) String() string {
	w, s := "x?", "?GT/s"
	if l.Width >= 0 {
		w = "x" + strconv.Itoa(l.Width)
	}
	if l.Speed > 0 {
		s = strconv.FormatFloat(l.Speed, 'f', -1, 64) + "GT/s"
	}
	return w + " " + s
}

// Below reports whether the link runs slower or narrower than max, judged
// on the halves both know.
func (l LinkRate) Below(max LinkRate) bool {
	return l.Speed > 0 && max.Speed > 0 && l.Speed < max.Speed ||
		l.Width >= 0 && max.Width > 0 && l.Width < max.Width
}

// NoIOMMUGroup is the IOMMU group of a function without one: no IOMMU (or
// one the kernel does not use), or an iommu_group link that was not read
// or is damaged.
const NoIOMMUGroup = -1

// maxLinkSpeed bounds a link speed in GT/s: PCIe 7.0 runs at 128.
const maxLinkSpeed = 1024

// parseLinkSpeed parses current_link_speed or max_link_speed: "16.0 GT/s
// PCIe" since Linux 5.2 (pci_speed_string in drivers/pci/probe.c), "8 GT/s"
// before (PCIE_SPEED2STR in drivers/pci/pci.h), into GT/s. "Unknown" and
// "Unknown speed", what either prints for a speed it cannot name, give 0.
func parseLinkSpeed(s string) (float64, error) {
	if s == "Unknown" || s == "Unknown speed" {
		return 0, nil
	}
	num, ok := strings.CutSuffix(strings.TrimSuffix(s, " PCIe"), " GT/s")
	if !ok || !isDecimal(num) {
		return 0, fmt.Errorf("%q is not a link speed (\"<number> GT/s PCIe\" or \"Unknown\")", clip(s))
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || v > maxLinkSpeed {
		return 0, fmt.Errorf("%q is not a link speed (\"<number> GT/s PCIe\" or \"Unknown\")", clip(s))
	}
	return v, nil
}

// isDecimal reports whether s is digits with at most one '.' between them:
// no sign, exponent or hex.
func isDecimal(s string) bool {
	i, f, _ := strings.Cut(s, ".")
	digits := func(x string) bool { return x != "" && strings.Trim(x, "0123456789") == "" }
	return digits(i) && (!strings.Contains(s, ".") || digits(f))
}

// linkWidthUnknown is PCIE_LNK_WIDTH_UNKNOWN (include/linux/pci.h), which
// max_link_width prints for a function whose Link Capabilities read 0.
const linkWidthUnknown = 255

// parseLinkWidth parses current_link_width or max_link_width: a decimal
// lane count (the Link Status or Link Capabilities width field, 0-63), or
// 255 for unknown, which gives UnknownWidth. A current width of 0 is a
// link that is down.
func parseLinkWidth(s string) (int, error) {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil || strings.Trim(s, "0123456789") != "" || len(s) > 3:
		return UnknownWidth, fmt.Errorf("%q is not a link width (0-63, or 255 for unknown)", clip(s))
	case n == linkWidthUnknown:
		return UnknownWidth, nil
	case n > 63:
		return UnknownWidth, fmt.Errorf("%q is not a link width (0-63, or 255 for unknown)", clip(s))
	}
	return n, nil
}

// parseIOMMUGroup parses the target of a function's iommu_group link,
// "../../../kernel/iommu_groups/12", into the group number.
func parseIOMMUGroup(target string) (int, error) {
	dir, n := path.Split(target)
	if path.Base(dir) != "iommu_groups" || n == "" || len(n) > 9 || strings.Trim(n, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a link to kernel/iommu_groups/<N>", clip(target))
	}
	v, _ := strconv.Atoi(n)
	return v, nil
}

// readOptional reads the optional attributes in want into d; name is the
// function as its errors name it. cpus shares parsed CPU lists between
// the functions of one discovery; nil parses each. nodes are the NUMA
// nodes' CPUs, read when a numa_node cannot be.
func readOptional(r *sysread.Reader, d *Device, name string, want optional, cpus map[string]CPUList, nodes *nodeCPUs) []error {
	var errs []error
	file := func(f string) string { return d.Path + "/" + f }
	absent := func(err error) bool {
		return errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink)
	}
	optional := func(f string, parse func(string) error) bool {
		s, err := r.ReadString(file(f))
		if absent(err) {
			return false // old kernels, a kernel without NUMA, a function that is not PCIe
		}
		if err == nil {
			err = parse(s)
		}
		if err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "pci", Device: name, File: file(f), Err: fserr.Cause(err)})
		}
		return true
	}
	if want&optRevision != 0 {
		optional("revision", func(s string) error {
			v, err := parseHexAttr(s, 8)
			if err == nil {
				d.Revision = uint8(v)
			}
			return err
		})
	}
	// A value that does not parse stays unknown (NoNUMA, no CPUs), with
	// the error: never the parser's zero.
	numaKnown := false
	if want&optNUMANode != 0 {
		optional("numa_node", func(s string) error {
			n, err := parseNUMANode(s)
			if err == nil {
				d.NUMANode, numaKnown = n, true
			}
			return err
		})
	}
	if want&optLocalCPUs != 0 {
		optional("local_cpulist", func(s string) error {
			c, ok := cpus[s]
			if !ok {
				var err error
				if c, err = ParseCPUList(s); err != nil {
					return err
				}
				if cpus != nil {
					cpus[s] = c
				}
			}
			d.LocalCPUs = c
			return nil
		})
	}
	// A numa_node that is absent or cannot be read or parsed (its error
	// stays) is the node whose CPUs are exactly local_cpulist: the kernel
	// prints the CPUs of the function's node there, all of them when it
	// has none. hwloc places a function by those CPUs too.
	if want&optNUMANode != 0 && !numaKnown && len(d.LocalCPUs) > 0 {
		d.NUMANode = nodes.nodeOf(r, d.LocalCPUs)
	}
	if want&optLink != 0 {
		// A function without the files (not PCI Express) keeps nil links;
		// a damaged file leaves its half 0, with the error.
		for _, l := range []struct {
			prefix string
			dst    **LinkRate
		}{{"current", &d.CurrentLink}, {"max", &d.MaxLink}} {
			link := LinkRate{Width: UnknownWidth}
			found := optional(l.prefix+"_link_speed", func(s string) error {
				v, err := parseLinkSpeed(s)
				link.Speed = v
				return err
			})
			found = optional(l.prefix+"_link_width", func(s string) error {
				v, err := parseLinkWidth(s)
				link.Width = v // UnknownWidth on error
				return err
			}) || found
			if found {
				*l.dst = &link
			}
		}
	}
	if want&optIOMMU != 0 {
		// The link's target is all there is to read: the group directory
		// it names need not be in a capture.
		t, err := r.ReadLink(file("iommu_group"))
		if err == nil {
			var g int
			if g, err = parseIOMMUGroup(t); err == nil {
				d.IOMMUGroup = g
			}
		}
		if err != nil && !absent(err) {
			errs = append(errs, &sysfs.Error{Subsystem: "pci", Device: name, File: file("iommu_group"), Err: fserr.Cause(err)})
		}
	}
	return errs
}

// nodeDir lists the NUMA nodes (host.NodeDir).
const nodeDir = "devices/system/node"

// nodeCPUs are the NUMA nodes' CPU lists (node<N>/cpulist), read at the
// first need.
type nodeCPUs struct {
	read  bool
	nodes map[int]CPUList
}

// nodeOf is the one NUMA node whose CPUs are exactly cpus; NoNUMA when no
// node's are, or several nodes' (a list that cannot be read is no match).
func (n *nodeCPUs) nodeOf(r *sysread.Reader, cpus CPUList) int {
	if !n.read {
		n.read, n.nodes = true, map[int]CPUList{}
		ents, _ := r.ReadDir(nodeDir)
		for _, e := range ents {
			id, ok := strings.CutPrefix(e.Name(), "node")
			num, err := strconv.Atoi(id)
			if !ok || err != nil || num < 0 || strconv.Itoa(num) != id {
				continue
			}
			s, err := r.ReadString(nodeDir + "/" + e.Name() + "/cpulist")
			if err != nil {
				continue
			}
			if l, err := ParseCPUList(s); err == nil {
				n.nodes[num] = l
			}
		}
	}
	node := NoNUMA
	for id, l := range n.nodes {
		if slices.Equal(l, cpus) {
			if node != NoNUMA {
				return NoNUMA
			}
			node = id
		}
	}
	return node
}
