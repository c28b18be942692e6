// Package snapshot captures from a live sysfs exactly what efakit reads,
// scrubbed of what identifies the host, as capture entries (see
// sysfs.WriteCapture). A capture replays through the same code as /sys.
package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/efakit/efakit/internal/linkpath"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// pciFiles are the attributes read from every PCI function; modalias is
// kept too so that other tools (ghw) can read a capture.
var pciFiles = []string{"uevent", "vendor", "device", "subsystem_vendor", "subsystem_device", "class", "revision", "numa_node", "local_cpulist", "modalias", "p2p",
	"current_link_speed", "current_link_width", "max_link_speed", "max_link_width", "gdr"}

// Options tune a snapshot.
type Options struct {
	// NoScrub keeps MAC addresses, GIDs and GUIDs as read.
	NoScrub bool
}

// Result is a snapshot and what could not be captured.
type Result struct {
	Entries []sysfs.Entry
	// Skipped are files that could not be read (write-only attributes,
	// files the kernel refuses to show), which the capture leaves out.
	Skipped []string
}

// Take captures fsys: the PCI functions and their drivers, the RDMA devices
// and uverbs devices below them, the network interfaces of PCI functions,
// NUMA nodes, the DMI product name and the Neuron class devices. What
// cannot be captured faithfully is left out with an error: a link whose
// target, written at the link's place in the capture, could lead out of it
// (absolute, climbing above the root, or with ".." after a name), and a name that is not UTF-8 or holds a control
// character.
func Take(fsys fs.FS, opts Options) (*Result, error) {
	c := &capturer{r: sysread.New(fsys), out: make(map[string]sysfs.Entry)}
	ents, err := c.r.ReadDir(sysattr.PCIDevicesDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	ents = c.names(sysattr.PCIDevicesDir, ents)
	c.dir(sysattr.PCIDevicesDir)
	for _, e := range ents {
		link := sysattr.PCIDevicesDir + "/" + e.Name()
		real, err := c.link(link)
		if err != nil {
			c.errs = append(c.errs, err)
			continue
		}
		for _, f := range pciFiles {
			c.file(real + "/" + f)
		}
		// A bridge's config space, for its ACS (gpudirect): as much as the
		// kernel shows this reader, 4096 bytes to root, 64 to others.
		if cl, err := c.r.ReadString(real + "/class"); err == nil && strings.HasPrefix(cl, "0x0604") {
			c.file(real + "/config")
		}
		if t, err := c.link(real + "/driver"); err == nil {
			c.dir(t)
		}
		// The IOMMU group: its directory (kernel/iommu_groups/N) as an
		// empty one, so the link resolves in the capture; none without an
		// IOMMU.
		if t, err := c.r.Resolve(real + "/iommu_group"); err == nil {
			c.dir(t)
			if _, err := c.link(real + "/iommu_group"); err != nil {
				c.errs = append(c.errs, err)
			}
		}
		for _, sub := range []string{"infiniband", "infiniband_verbs"} {
			c.tree(real + "/" + sub)
		}
		if nets, err := c.list(real + "/net"); err == nil {
			for _, n := range nets {
				nd := real + "/net/" + n.Name()
				for _, f := range []string{"address", "operstate", "ifindex", "mtu"} {
					c.file(nd + "/" + f)
				}
			}
		}
		// A function none of whose files could be read: its link would
		// dangle in the capture.
		if _, ok := c.out[real]; !ok && !c.hasUnder(real) {
			delete(c.out, link)
			c.skipped = append(c.skipped, fmt.Sprintf("%s: nothing under %s could be read", link, real))
		}
	}
	// Class links into what was captured.
	for _, class := range []string{"class/infiniband", "class/infiniband_verbs", "class/net", "class/neuron_device"} {
		ents, err := c.list(class)
		if err != nil {
			continue
		}
		c.dir(class)
		for _, e := range ents {
			p := class + "/" + e.Name()
			real, err := c.r.Resolve(p)
			if err != nil {
				c.errs = append(c.errs, err)
				continue
			}
			// RDMA devices of no PCI function (soft-RoCE's rxe, siw) are
			// under devices/virtual: captured whole, as doctor and a
			// counters reader see every RDMA device, not only EFAs.
			if class == "class/neuron_device" || (class != "class/net" && strings.HasPrefix(real, "devices/virtual/")) {
				c.tree(real)
			}
			if _, ok := c.out[real]; ok || c.hasUnder(real) {
				if _, err := c.link(p); err != nil {
					c.errs = append(c.errs, err)
				}
			}
		}
	}
	if nodes, err := c.list("devices/system/node"); err == nil {
		c.dir("devices/system/node")
		for _, f := range []string{"online", "possible"} {
			c.file("devices/system/node/" + f)
		}
		for _, n := range nodes {
			if strings.HasPrefix(n.Name(), "node") && n.IsDir() {
				for _, f := range []string{"cpulist", "distance"} {
					c.file("devices/system/node/" + n.Name() + "/" + f)
				}
				// The socket of each CPU: host reads the first CPU's,
				// deviceattribute any CPU's of the node.
				if s, err := c.r.ReadString("devices/system/node/" + n.Name() + "/cpulist"); err == nil {
					if cpus, err := pcie.ParseCPUList(s); err == nil {
						for _, cpu := range cpus {
							c.file(fmt.Sprintf("devices/system/cpu/cpu%d/topology/physical_package_id", cpu))
						}
					}
				}
			}
		}
	}
	// neuron.ReadClass lists the class devices where they lie, not through
	// class/neuron_device: a device without its class link is read too.
	c.tree(sysattr.NeuronClassDir)
	c.file("devices/virtual/dmi/id/product_name")
	c.file(sysattr.EFADriverVersion)    // the out-of-tree efa driver's version
	c.file(sysattr.NVIDIADriverVersion) // the nvidia driver's, for its branch's rules
	// The link only where it leads to what was captured: it would dangle.
	if t, err := c.r.Resolve("class/dmi/id"); err == nil && c.hasUnder(t) {
		if _, err := c.link("class/dmi/id"); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	res := &Result{Skipped: c.skipped}
	for _, e := range c.out {
		res.Entries = append(res.Entries, e)
	}
	slices.SortFunc(res.Entries, func(a, b sysfs.Entry) int { return strings.Compare(a.Path, b.Path) })
	if !opts.NoScrub {
		scrub(res.Entries)
	}
	return res, errors.Join(c.errs...)
}

type capturer struct {
	r       *sysread.Reader
	out     map[string]sysfs.Entry
	skipped []string
	errs    []error
}

// list lists the directory p, leaving out names that cannot be captured.
func (c *capturer) list(p string) ([]fs.DirEntry, error) {
	ents, err := c.r.ReadDir(p)
	if err != nil {
		return nil, err
	}
	return c.names(p, ents), nil
}

// names returns the entries of directory p whose names can be captured,
// with an error naming p for each of the others. A name that is not UTF-8
// makes no valid path; a control character would hide in a listing.
func (c *capturer) names(p string, ents []fs.DirEntry) []fs.DirEntry {
	return slices.DeleteFunc(slices.Clone(ents), func(e fs.DirEntry) bool {
		why := badName(e.Name())
		if why != "" {
			c.errs = append(c.errs, fmt.Errorf("directory %q: name %q %s, left out", p, e.Name(), why))
		}
		return why != ""
	})
}

// badName says what makes a name impossible to capture, "" when nothing
// does.
func badName(name string) string {
	if !utf8.ValidString(name) {
		return "is not UTF-8"
	}
	if strings.ContainsFunc(name, unicode.IsControl) {
		return "holds a control character"
	}
	return ""
}

func (c *capturer) dir(p string) {
	if _, ok := c.out[p]; !ok {
		c.out[p] = sysfs.Entry{Path: p, Kind: sysfs.KindDir}
	}
}

// hasUnder reports whether anything below p was captured.
func (c *capturer) hasUnder(p string) bool {
	for k := range c.out {
		if strings.HasPrefix(k, p+"/") {
			return true
		}
	}
	return false
}

// file captures a regular file when it exists and can be read.
func (c *capturer) file(p string) {
	b, err := c.r.ReadFile(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.skipped = append(c.skipped, fmt.Sprintf("%s: %v", p, err))
		}
		return
	}
	c.out[p] = sysfs.Entry{Path: p, Kind: sysfs.KindFile, Data: b}
}

// link captures a symbolic link verbatim and returns where it resolves. A
// target that could lead out of the capture from the link's place in it is
// refused: p is where the link is written, which is not where it lies when
// a directory on the way is itself a link.
func (c *capturer) link(p string) (string, error) {
	t, err := c.r.ReadLink(p)
	if err != nil {
		return "", err
	}
	real, err := c.r.Resolve(p)
	if err != nil {
		return "", err
	}
	if err := linkpath.CheckLink(p, t); err != nil {
		return "", err
	}
	c.out[p] = sysfs.Entry{Path: p, Kind: sysfs.KindLink, Target: t}
	return real, nil
}

// tree captures a directory recursively: its files, and of its links only
// "device" (the way back to the PCI function). power/ and the subsystem
// links lead out of what efakit reads.
func (c *capturer) tree(p string) {
	ents, err := c.list(p)
	if err != nil {
		return
	}
	c.dir(p)
	for _, e := range ents {
		q := p + "/" + e.Name()
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			if e.Name() == "device" {
				if _, err := c.link(q); err != nil {
					c.errs = append(c.errs, err)
				}
			}
		case e.IsDir():
			if e.Name() != "power" {
				c.tree(q)
			}
		case e.Name() == "uevent":
		default:
			c.file(q)
		}
	}
}

// scrub replaces what identifies the host: MAC addresses of network
// interfaces, the EFA GIDs made from them, and node and system image GUIDs.
// A MAC and the GID made from it map to the same replacement, so the
// ENA-beside-EFA match survives.
func scrub(es []sysfs.Entry) {
	macs := map[string]string{}
	newMAC := func(old string) string {
		old = strings.ToLower(old)
		if m, ok := macs[old]; ok {
			return m
		}
		n := len(macs) + 1
		m := fmt.Sprintf("02:00:00:00:%02x:%02x", n>>8&0xff, n&0xff)
		macs[old] = m
		return m
	}
	guids := map[string]string{}
	for i := range es {
		e := &es[i]
		if e.Kind != sysfs.KindFile {
			continue
		}
		dir, base := path.Split(e.Path)
		v := strings.TrimSpace(string(e.Data))
		switch {
		case base == "address" && strings.Contains(dir, "/net/"):
			if strings.Count(v, ":") == 5 {
				e.Data = []byte(newMAC(v) + "\n")
			}
		case strings.HasSuffix(dir, "/gids/"):
			if mac, ok := gidMAC(v); ok {
				e.Data = []byte(gidFromMAC(newMAC(mac)) + "\n")
			} else if v != "" && strings.Trim(v, "0:") != "" {
				e.Data = []byte("fe80:0000:0000:0000:0000:0000:0000:0000\n")
			}
		case base == "node_guid" || base == "sys_image_guid":
			if strings.Trim(v, "0:") == "" {
				continue // all zeros identifies nothing
			}
			g, ok := guids[v]
			if !ok {
				n := len(guids) + 1
				g = fmt.Sprintf("0000:0000:%04x:%04x", n>>16&0xffff, n&0xffff)
				guids[v] = g
			}
			e.Data = []byte(g + "\n")
		}
	}
}

// gidMAC recovers the MAC from an EUI-64 link-local GID.
func gidMAC(gid string) (string, bool) {
	g := strings.ReplaceAll(strings.ToLower(gid), ":", "")
	if len(g) != 32 || g[:16] != "fe80000000000000" || g[22:26] != "fffe" {
		return "", false
	}
	var b [6]byte
	for i, pos := range []int{16, 18, 20, 26, 28, 30} {
		var v byte
		if _, err := fmt.Sscanf(g[pos:pos+2], "%02x", &v); err != nil {
			return "", false
		}
		b[i] = v
	}
	b[0] ^= 2
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]), true
}

func gidFromMAC(mac string) string {
	var b [6]byte
	fmt.Sscanf(mac, "%02x:%02x:%02x:%02x:%02x:%02x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5])
	return fmt.Sprintf("fe80:0000:0000:0000:%02x%02x:%02xff:fe%02x:%02x%02x", b[0]^2, b[1], b[2], b[3], b[4], b[5])
}
