// Package efa finds the AWS Elastic Fabric Adapters of a sysfs root: the PCI
// function, its RDMA (infiniband class) device, ports, uverbs character
// device and the ENA network interface beside it.
package efa

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// vendorAmazon is Amazon's PCI vendor ID.
const vendorAmazon = 0x1d0f

// Generation is the EFA generation, from the PCI device ID: 0xefa0 is efa0
// (p4d), 0xefa1 efa1 (p5, trn1), 0xefa2 efa2 (p5en), 0xefa3 efa3.
type Generation uint16

// isEFAID reports whether an Amazon device ID is in the EFA range
// 0xefa0-0xefaf, which holds every generation so far and those to come.
func isEFAID(device uint16) bool { return device&0xfff0 == 0xefa0 }

// String prints "efa1" for an ID in the EFA range, and the raw ID of a
// function bound to the efa driver under another ID.
func (g Generation) String() string {
	if isEFAID(uint16(g)) {
		return fmt.Sprintf("efa%x", uint16(g)&0xf)
	}
	return fmt.Sprintf("0x%04x", uint16(g))
}

// MarshalText prints String.
func (g Generation) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// Device is one EFA.
type Device struct {
	// Name is the RDMA device name: rdmap79s0 after rdma-core's udev
	// rename, efa_0 without it.
	Name       string
	PCI        *pcie.Device
	Generation Generation
	// IBPath is the RDMA device's real directory, PCI.Path/infiniband/Name.
	IBPath string
	// NodeGUID, SysImageGUID and FirmwareVer are "" when their file is
	// missing or damaged (not a GUID, not printable text).
	NodeGUID     string // infiniband/<name>/node_guid
	SysImageGUID string // infiniband/<name>/sys_image_guid
	FirmwareVer  string // infiniband/<name>/fw_ver; often empty for EFA
	Ports        []Port
	// Verbs is the uverbs character device; nil when the kernel made none
	// (ib_uverbs not loaded), which is also reported as an error. Its
	// methods are safe on nil: DevicePath gives "", Dev 0.
	Verbs *Verbs
	// Netdev is the ENA network interface beside the EFA, "" for an
	// EFA-only interface or when none can be told (an ENA whose name
	// cannot be printed is never one).
	Netdev string
	// P2P is the out-of-tree driver's peer-to-peer readiness
	// (PCI.Path/p2p: "NVIDIA", "NEURON"...); "" where the file is absent
	// or damaged.
	P2P string
	// GDR is the legacy gdr file of out-of-tree drivers before 2.6.0
	// (PCI.Path/gdr), which p2p replaced: true for "1", NVIDIA's
	// peer-memory symbols found (GPUDirect RDMA possible), false for
	// "0". nil where the file is absent (the in-tree driver, or 2.6.0
	// and later) or damaged. amzn-drivers:
	// kernel/linux/efa/src/efa_sysfs.c, commits 4f19416 (added), dc11381
	// ("0" without the symbols) and cf3152e (replaced by p2p).
	GDR *bool
}

// Port is one port of an RDMA device, from infiniband/<name>/ports/<n>/.
// A file that is missing or does not parse leaves its field unknown: "",
// and 0 for RateGbps.
type Port struct {
	Number    int
	State     string  // state, "ACTIVE" from "4: ACTIVE"
	PhysState string  // phys_state, "LinkUp" from "5: LinkUp"
	LinkLayer string  // link_layer, "Unknown" for EFA
	Rate      string  // rate, as printed: "100 Gb/sec (4X EDR)"
	RateGbps  float64 // the number in rate
	GID       string  // gids/0, "fe80:0000:0000:0000:14b0:33ff:fef8:77cd"; "" when none
}

// Verbs is an RDMA device's uverbs character device, from
// infiniband_verbs/uverbsN/ under the PCI function.
type Verbs struct {
	Name  string // uverbs3
	Major uint32 // from dev
	Minor uint32
}

// DevicePath is the character device's node, /dev/infiniband/uverbsN; ""
// without a uverbs device (v nil), so that a caller can print the path of
// every EFA without a check.
func (v *Verbs) DevicePath() string {
	if v == nil {
		return ""
	}
	return "/dev/infiniband/" + v.Name
}

// Dev is the device number, as in stat's st_rdev; 0 without a uverbs device
// (v nil): 0:0 is no device's number, the st_rdev of a file that is none.
func (v *Verbs) Dev() uint64 {
	if v == nil {
		return 0
	}
	return unix.Mkdev(v.Major, v.Minor)
}

// IsEFA reports whether a PCI function is an EFA by its IDs or driver. It
// is an RDMA device only when the efa driver has made an infiniband child.
func IsEFA(d *pcie.Device) bool {
	return d.Vendor == vendorAmazon && isEFAID(d.Device) || d.Driver == "efa"
}

// isENA reports whether a function is an ENA: Amazon's ENA IDs or the ena
// driver.
func isENA(d *pcie.Device) bool {
	if d.Driver == "ena" {
		return true
	}
	if d.Vendor != vendorAmazon {
		return false
	}
	switch d.Device {
	case 0x0ec2, 0x1ec2, 0xec20, 0xec21:
		return true
	}
	return false
}

// Result is what Discover finds.
type Result struct {
	EFAs []*Device // in PCI address order
	// Inactive are EFA functions without an RDMA device (efa driver not
	// loaded or not bound): not usable, and not in EFAs.
	Inactive []*pcie.Device
}

// optional names the attributes of an EFA that a lean pass may leave
// unread (internal/sysread's EFA bits).
type optional uint8

const (
	optSysImageGUID = optional(sysread.EFASysImageGUID) // sys_image_guid: Device.SysImageGUID
	optFirmwareVer  = optional(sysread.EFAFirmwareVer)  // fw_ver: Device.FirmwareVer
	optGDR          = optional(sysread.EFAGDR)          // PCI.Path/gdr: Device.GDR
	optAll          = optional(sysread.EFAAll)
)

// Discover finds the EFAs among the functions of tree, each with all its
// attributes. It returns what it could read, and one error per damaged
// device or file, joined.
func Discover(fsys fs.FS, tree *pcie.Tree) (*Result, error) {
	r := sysread.New(fsys)
	want := optAll
	if l := r.Lean(); l != nil {
		want = optional(l.EFA)
	}
	return discoverOnly(r, tree, want)
}

// discoverOnly is Discover reading, of each EFA's optional attributes,
// only those in want; the others stay "".
func discoverOnly(r *sysread.Reader, tree *pcie.Tree, want optional) (*Result, error) {
	res := &Result{}
	var errs []error
	enas := enaNetdevs(r, tree, &errs)
	for _, d := range tree.Devices {
		if !IsEFA(d) {
			continue
		}
		ibDir := d.Path + "/infiniband"
		ents, err := r.ReadDir(ibDir)
		if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink) {
			res.Inactive = append(res.Inactive, d)
			continue
		}
		if err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: d.Address.String(), File: ibDir, Err: fserr.Cause(err)})
			continue
		}
		if len(ents) != 1 {
			errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: d.Address.String(), File: ibDir, Err: fmt.Errorf("want one RDMA device, found %d", len(ents))})
			if len(ents) == 0 {
				res.Inactive = append(res.Inactive, d)
				continue
			}
		}
		// A name that cannot be printed would forge rows of `efakit list`
		// and be published: the device is left out.
		if err := names.CheckName(ents[0].Name()); err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: d.Address.String(), File: ibDir, Err: fmt.Errorf("RDMA device left out: %w", err)})
			continue
		}
		dev, derrs := readDevice(r, d, ents[0].Name(), want)
		errs = append(errs, derrs...)
		if dev != nil {
			res.EFAs = append(res.EFAs, dev)
		}
	}
	pairNetdevs(res.EFAs, enas)
	return res, errors.Join(errs...)
}

func readDevice(r *sysread.Reader, pci *pcie.Device, name string, want optional) (*Device, []error) {
	ib := pci.Path + "/infiniband/" + name
	d := &Device{Name: name, PCI: pci, Generation: Generation(pci.Device), IBPath: ib}
	var errs []error
	fail := func(file string, err error) {
		errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: name, File: file, Err: fserr.Cause(err)})
	}
	// node_guid, sys_image_guid and fw_ver exist for every RDMA device. A
	// value that does not check stays unknown (""), with the error.
	if s, err := r.ReadString(ib + "/node_guid"); err != nil { // efakit list
		fail(ib+"/node_guid", err)
	} else if err := checkGUID(s); err != nil {
		fail(ib+"/node_guid", err)
	} else {
		d.NodeGUID = s
	}
	errs = append(errs, readOptional(r, d, want)...)

	ports, err := r.ReadDir(ib + "/ports")
	if err != nil {
		fail(ib+"/ports", err)
	}
	for _, p := range ports {
		port, perrs := readPort(r, name, ib+"/ports/"+p.Name())
		errs = append(errs, perrs...)
		if port != nil {
			d.Ports = append(d.Ports, *port)
		}
	}
	slices.SortFunc(d.Ports, func(a, b Port) int { return a.Number - b.Number })

	v, err := findVerbs(r, pci, name)
	if err != nil {
		errs = append(errs, err)
	}
	d.Verbs = v

	// p2p: efakit list shows it.
	switch s, err := r.ReadString(pci.Path + "/p2p"); {
	case err == nil:
		if err := names.CheckText(s); err != nil {
			fail(pci.Path+"/p2p", err)
		} else {
			d.P2P = s
		}
	case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
		// the in-tree driver has no p2p file
	default:
		fail(pci.Path+"/p2p", err)
	}
	return d, errs
}

// readOptional reads the optional attributes in want into d.
func readOptional(r *sysread.Reader, d *Device, want optional) []error {
	var errs []error
	fail := func(file string, err error) {
		errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: d.Name, File: file, Err: fserr.Cause(err)})
	}
	for _, f := range []struct {
		name  string
		dst   *string
		check func(string) error
		opt   optional
	}{
		{"sys_image_guid", &d.SysImageGUID, checkGUID, optSysImageGUID},
		{"fw_ver", &d.FirmwareVer, names.CheckText, optFirmwareVer},
	} {
		if want&f.opt == 0 {
			continue
		}
		file := d.IBPath + "/" + f.name
		s, err := r.ReadString(file)
		if err == nil {
			err = f.check(s)
		}
		if err != nil {
			fail(file, err)
			continue
		}
		*f.dst = s
	}
	if want&optGDR != 0 {
		file := d.PCI.Path + "/gdr"
		switch s, err := r.ReadString(file); {
		case err == nil:
			g, err := parseGDR(s)
			if err != nil {
				fail(file, err)
			} else {
				d.GDR = &g
			}
		case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
			// the in-tree driver, or an out-of-tree one with p2p instead
		default:
			fail(file, err)
		}
	}
	return errs
}

// parseGDR parses the legacy gdr file: "1" or "0".
func parseGDR(s string) (bool, error) {
	switch s {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a gdr value (\"1\" or \"0\")", clip(s))
}

// ReadDriverVersion reads the efa module's version from the same root as
// the devices (os.DirFS("/sys") holds module/). It returns "" without an
// error where the file is absent: the in-tree driver, or a version
// unknown. A file that cannot be read or is not a version is an error
// naming it, and "".
func ReadDriverVersion(fsys fs.FS) (string, error) {
	r := sysread.New(fsys)
	s, err := r.ReadString(sysattr.EFADriverVersion)
	if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink) {
		return "", nil
	}
	if err == nil {
		err = sysattr.CheckModuleVersion(s)
	}
	if err != nil {
		return "", &sysfs.Error{Subsystem: "efa", Device: "efa module", File: sysattr.EFADriverVersion, Err: fserr.Cause(err)}
	}
	return s, nil
}

func readPort(r *sysread.Reader, dev, dir string) (*Port, []error) {
	var errs []error
	fail := func(file string, err error) {
		errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: dev, File: file, Err: fserr.Cause(err)})
	}
	n, err := strconv.Atoi(path.Base(dir))
	if err != nil || n < 1 || n > 255 {
		fail(dir, fmt.Errorf("%q is not a port number", path.Base(dir)))
		return nil, errs
	}
	p := &Port{Number: n}
	read := func(f string, parse func(string) error) {
		s, err := r.ReadString(dir + "/" + f)
		if err == nil {
			err = parse(s)
		}
		if err != nil {
			fail(dir+"/"+f, err)
		}
	}
	// A value that does not parse stays unknown (empty, zero), with the
	// error.
	enum := func(dst *string) func(string) error {
		return func(s string) error {
			v, err := parseEnumAttr(s)
			if err == nil {
				*dst = v
			}
			return err
		}
	}
	// Each file is used: state by health (an EFA not ACTIVE is tainted),
	// phys_state and link_layer by efakit list, rate by the published
	// linkRateGbps, gids/0 to pair the EFA with its ENA interface.
	read("state", enum(&p.State))
	read("phys_state", enum(&p.PhysState))
	read("link_layer", func(s string) error {
		err := names.CheckName(s)
		if err == nil {
			p.LinkLayer = s
		}
		return err
	})
	read("rate", func(s string) error {
		g, err := parseRate(s)
		if err == nil {
			p.Rate, p.RateGbps = s, g
		}
		return err
	})
	switch s, err := r.ReadString(dir + "/gids/0"); {
	case err == nil && s == "":
		// no GID set
	case err == nil:
		if err := checkGID(s); err != nil {
			fail(dir+"/gids/0", err)
		} else {
			p.GID = s
		}
	case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
	default:
		fail(dir+"/gids/0", err)
	}
	return p, errs
}

// findVerbs finds the uverbs device of the RDMA device name among the
// function's infiniband_verbs children (ibdev says which RDMA device each
// serves; dev holds the character device's numbers, for CDI). It returns
// the device it found with the errors of entries it left out (names that
// are not uverbs<N>), or nil and why.
func findVerbs(r *sysread.Reader, pci *pcie.Device, name string) (*Verbs, error) {
	dir := pci.Path + "/infiniband_verbs"
	ents, err := r.ReadDir(dir)
	if err != nil {
		return nil, &sysfs.Error{Subsystem: "efa", Device: name, File: dir, Err: fserr.Cause(err)}
	}
	// The kernel names them uverbs<N>; the name makes the device node's
	// path, which a container is given. Other names are left out, and
	// reported when they look like one or cannot be printed.
	var bad []error
	ok := make([]bool, len(ents))
	for i, e := range ents {
		err := checkUverbsName(e.Name())
		ok[i] = err == nil
		if err != nil && (strings.HasPrefix(e.Name(), "uverbs") || names.CheckName(e.Name()) != nil) {
			bad = append(bad, &sysfs.Error{Subsystem: "efa", Device: name, File: dir, Err: fmt.Errorf("uverbs device left out: %w", err)})
		}
	}
	errs := bad
	for i, e := range ents {
		if !ok[i] {
			continue
		}
		vd := dir + "/" + e.Name()
		ibdev, err := r.ReadString(vd + "/ibdev")
		if err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: name, File: vd + "/ibdev", Err: fserr.Cause(err)})
			continue
		}
		if ibdev != name {
			continue
		}
		s, err := r.ReadString(vd + "/dev")
		if err == nil {
			var v Verbs
			v.Major, v.Minor, err = sysattr.ParseDevNumber(s)
			if err == nil {
				v.Name = e.Name()
				return &v, errors.Join(bad...)
			}
		}
		return nil, errors.Join(append(bad, &sysfs.Error{Subsystem: "efa", Device: name, File: vd + "/dev", Err: fserr.Cause(err)})...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return nil, &sysfs.Error{Subsystem: "efa", Device: name, File: dir, Err: errors.New("no uverbs device (is ib_uverbs loaded?)")}
}

// enaNetdevs lists the network interfaces of ENA functions.
func enaNetdevs(r *sysread.Reader, tree *pcie.Tree, errs *[]error) []netdev {
	var out []netdev
	for _, d := range tree.Devices {
		if !isENA(d) {
			continue
		}
		ents, err := r.ReadDir(d.Path + "/net")
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				*errs = append(*errs, &sysfs.Error{Subsystem: "efa", Device: d.Address.String(), File: d.Path + "/net", Err: fserr.Cause(err)})
			}
			continue
		}
		for _, e := range ents {
			if err := names.CheckName(e.Name()); err != nil {
				*errs = append(*errs, &sysfs.Error{Subsystem: "efa", Device: d.Address.String(), File: d.Path + "/net", Err: fmt.Errorf("network interface left out: %w", err)})
				continue
			}
			// A MAC that cannot be read or parsed stays unknown: the
			// interface pairs by its segment only.
			nd := netdev{name: e.Name(), pci: d}
			f := d.Path + "/net/" + e.Name() + "/address"
			mac, err := r.ReadString(f)
			if err == nil {
				_, err = parseMAC(mac)
			}
			if err != nil {
				*errs = append(*errs, &sysfs.Error{Subsystem: "efa", Device: d.Address.String(), File: f, Err: fserr.Cause(err)})
			} else {
				nd.mac = mac
			}
			out = append(out, nd)
		}
	}
	return out
}

type netdev struct {
	name string
	mac  string
	pci  *pcie.Device
}

// pairNetdevs finds the ENA interface of the same network interface as
// each EFA. The EFA's GID is the IPv6 link-local address that EUI-64 makes
// from the interface's MAC, which names its ENA exactly. An EFA without such
// a match takes the ENA of its segment (same upstream bridge, or same root
// bus) only when that segment has exactly one ENA and one EFA left
// unmatched; otherwise it is an EFA-only interface.
//
// Each EFA costs a lookup, not a pass over every ENA and EFA: machines
// with thousands of EFAs stay linear.
func pairNetdevs(efas []*Device, enas []netdev) {
	gids := make(map[string]int, len(enas)) // the first ENA with each GID
	for i, n := range enas {
		if n.mac == "" {
			continue
		}
		if g := eui64GID(n.mac); g != "" {
			if _, ok := gids[g]; !ok {
				gids[g] = i
			}
		}
	}
	used := make(map[int]bool)
	var rest []*Device
	for _, d := range efas {
		i := gidMatch(d, gids)
		if i >= 0 && !used[i] {
			used[i] = true
			d.Netdev = enas[i].name
			continue
		}
		rest = append(rest, d)
	}
	cands := map[segment][]int{} // unmatched ENAs by segment
	for i, n := range enas {
		if !used[i] {
			cands[segmentOf(n.pci)] = append(cands[segmentOf(n.pci)], i)
		}
	}
	peers := map[segment]int{} // unmatched EFAs by segment
	for _, d := range rest {
		peers[segmentOf(d.PCI)]++
	}
	for _, d := range rest {
		s := segmentOf(d.PCI)
		if c := cands[s]; len(c) == 1 && peers[s] == 1 {
			d.Netdev = enas[c[0]].name
		}
	}
}

func gidMatch(d *Device, gids map[string]int) int {
	for _, p := range d.Ports {
		if p.GID == "" {
			continue
		}
		if i, ok := gids[strings.ToLower(p.GID)]; ok {
			return i
		}
	}
	return -1
}

// segment is a function's upstream bridge, or its root bus when it has
// none: functions of one segment share it.
type segment struct {
	parent *pcie.Device
	root   string
	bus    uint8
}

func segmentOf(d *pcie.Device) segment {
	if d.Parent != nil {
		return segment{parent: d.Parent}
	}
	return segment{root: d.Root, bus: d.Address.Bus}
}

// eui64GID returns the link-local GID fe80::/64 that EUI-64 makes from a
// MAC address, in sysfs's format, or "" for a malformed MAC.
func eui64GID(mac string) string {
	b, err := parseMAC(mac)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("fe80:0000:0000:0000:%02x%02x:%02xff:fe%02x:%02x%02x", b[0]^2, b[1], b[2], b[3], b[4], b[5])
}

// parseEnumAttr parses the "4: ACTIVE" form of port state files into the
// name, which must be printable ("7: Phy Test" has a space).
func parseEnumAttr(s string) (string, error) {
	num, name, ok := strings.Cut(s, ": ")
	if !ok || name == "" || num == "" || strings.TrimLeft(num, "0123456789") != "" || names.CheckText(name) != nil {
		return "", fmt.Errorf("%q is not \"<number>: <NAME>\"", clip(s))
	}
	return name, nil
}

// parseRate parses a port rate, "100 Gb/sec (4X EDR)" or "2.5 Gb/sec", into
// Gb/s. The whole text must be printable: it is kept as Port.Rate.
func parseRate(s string) (float64, error) {
	num, rest, ok := strings.Cut(s, " ")
	if !ok || !strings.HasPrefix(rest, "Gb/sec") || names.CheckText(s) != nil {
		return 0, fmt.Errorf("%q is not \"<number> Gb/sec ...\"", clip(s))
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v > 1e6 || strings.ContainsAny(num, "eEnNiIxX+-") {
		return 0, fmt.Errorf("%q is not \"<number> Gb/sec ...\"", clip(s))
	}
	return v, nil
}

// checkGUID checks the "cd77:f833:0000:1001" form: four groups of four hex
// digits.
func checkGUID(s string) error {
	if !hexGroups(s, 4, 4) {
		return fmt.Errorf("%q is not a GUID (xxxx:xxxx:xxxx:xxxx)", clip(s))
	}
	return nil
}

// checkGID checks the form sysfs prints a GID in,
// "fe80:0000:0000:0000:14b0:33ff:fef8:77cd": eight groups of four hex
// digits.
func checkGID(s string) error {
	if !hexGroups(s, 8, 4) {
		return fmt.Errorf("%q is not a GID (eight groups of four hex digits)", clip(s))
	}
	return nil
}

// parseMAC parses a MAC address as sysfs prints it, "16:b0:33:f8:77:cd".
func parseMAC(s string) ([6]byte, error) {
	var b [6]byte
	if !hexGroups(s, 6, 2) {
		return b, fmt.Errorf("%q is not a MAC address (xx:xx:xx:xx:xx:xx)", clip(s))
	}
	for i := range b {
		v, _ := strconv.ParseUint(s[3*i:3*i+2], 16, 8)
		b[i] = byte(v)
	}
	return b, nil
}

// hexGroups reports whether s is n groups of width hex digits joined by
// ':'.
func hexGroups(s string, n, width int) bool {
	parts := strings.Split(s, ":")
	if len(parts) != n {
		return false
	}
	for _, p := range parts {
		if len(p) != width || strings.Trim(p, "0123456789abcdefABCDEF") != "" {
			return false
		}
	}
	return true
}

// checkUverbsName checks the kernel's name of a uverbs device, uverbs<N>.
func checkUverbsName(s string) error {
	n, ok := strings.CutPrefix(s, "uverbs")
	if !ok || n == "" || len(n) > 7 || strings.TrimLeft(n, "0123456789") != "" {
		if err := names.CheckName(s); err != nil {
			return err
		}
		return fmt.Errorf("%q is not uverbs<N>", clip(s))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Scan reads the PCI tree and the EFAs of a sysfs root in one pass, which
// reads no file twice.
func Scan(fsys fs.FS) (*pcie.Tree, *Result, error) {
	r := sysread.New(fsys)
	tree, perr := pcie.Discover(r)
	res, eerr := Discover(r, tree)
	return tree, res, errors.Join(perr, eerr)
}

// Current is what the kernel says of one EFA now: its RDMA device and that
// device's uverbs character device.
type Current struct {
	RDMAName string
	Verbs    Verbs
}

// ReadCurrent reads one EFA's RDMA device name and uverbs device from
// bus/pci/devices/<addr> (infiniband/ and infiniband_verbs/), a handful of
// reads instead of a whole discovery. The kubelet plugin calls it when it
// prepares a claim and when it restores one, because an efa or ib_uverbs
// module reload numbers the uverbs devices anew without a reboot.
func ReadCurrent(fsys fs.FS, addr pcie.Address) (Current, error) {
	r := sysread.New(fsys)
	dir := "bus/pci/devices/" + addr.String()
	ib := dir + "/infiniband"
	ents, err := r.ReadDir(ib)
	if err != nil {
		return Current{}, &sysfs.Error{Subsystem: "efa", Device: addr.String(), File: ib, Err: fserr.Cause(err)}
	}
	if len(ents) != 1 {
		return Current{}, &sysfs.Error{Subsystem: "efa", Device: addr.String(), File: ib, Err: fmt.Errorf("want one RDMA device, found %d", len(ents))}
	}
	name := ents[0].Name()
	if err := names.CheckName(name); err != nil {
		return Current{}, &sysfs.Error{Subsystem: "efa", Device: addr.String(), File: ib, Err: fmt.Errorf("RDMA device left out: %w", err)}
	}
	// Entries left out beside the device found were reported by the
	// discovery; they do not stop a prepare.
	v, err := findVerbs(r, &pcie.Device{Address: addr, Path: dir}, name)
	if v == nil {
		return Current{}, err
	}
	return Current{RDMAName: name, Verbs: *v}, nil
}
