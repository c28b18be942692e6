// Package neuron knows the AWS Neuron (Inferentia, Trainium) devices: their
// PCI IDs, the neuron driver's class devices, the per-family tables that tie
// a Neuron index to its PCI function and its EFA, and the device-group IDs
// that AWS's Neuron and EFA DRA drivers publish so that claims can pair them.
package neuron

import (
	"crypto/sha256"
	"encoding/hex"
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

// driverName is the kernel driver of Neuron PCI functions.
const driverName = "neuron-driver"

// IsNeuron reports whether a PCI function is a Neuron device: Amazon's
// Inferentia/Trainium IDs or the neuron driver.
func IsNeuron(d *pcie.Device) bool {
	if d.Driver == driverName {
		return true
	}
	if d.Vendor != 0x1d0f {
		return false
	}
	switch d.Device {
	case 0x7064, 0x7065, 0x7066, 0x7067, // Inferentia1
		0x7264, // Inferentia2
		0x7164, // Trainium1
		0x7364: // Trainium2
		return true
	}
	return false
}

// ClassDevice is devices/virtual/neuron_device/neuron<Index>. A file that
// is absent or does not parse leaves its field unknown: 0, nil or "".
type ClassDevice struct {
	Index      int
	CoreCount  int    // core_count (printed without a newline)
	Connected  []int  // connected_devices: torus neighbours
	ArchType   string // info/architecture/arch_type, "NDv2"
	Instance   string // info/architecture/instance_type, "Trn1"
	DeviceName string // info/architecture/device_name, "Trainium1"
}

// parseIndex parses the N of a class device's name, neuron<N>, as the
// driver prints it: decimal, no sign or leading zero, at most 1023.
func parseIndex(name string) (int, bool) {
	idx, ok := strings.CutPrefix(name, "neuron")
	if !ok || idx == "" || len(idx) > 4 || strings.TrimLeft(idx, "0123456789") != "" || idx[0] == '0' && idx != "0" {
		return 0, false
	}
	n, _ := strconv.Atoi(idx)
	return n, n <= 1023
}

// optional names the attributes of a class device that a lean pass may
// leave unread (internal/sysread's Neuron bits): the topology needs only
// which indexes exist.
type optional uint8

const (
	optCoreCount = optional(sysread.NeuronCoreCount) // core_count: ClassDevice.CoreCount
	optConnected = optional(sysread.NeuronConnected) // connected_devices: ClassDevice.Connected
	optArch      = optional(sysread.NeuronArch)      // info/architecture/*: ArchType, Instance, DeviceName
	optAll       = optional(sysread.NeuronAll)
)

// ReadClass reads the neuron driver's class devices, by index, each with
// all its attributes. A machine without the driver has none, and no
// error.
func ReadClass(fsys fs.FS) ([]ClassDevice, error) {
	r := sysread.New(fsys)
	want := optAll
	if l := r.Lean(); l != nil {
		want = optional(l.Neuron)
	}
	return readClassOnly(r, want)
}

// readClassOnly is ReadClass reading, of each class device's optional
// attributes, only those in want; the others stay unknown (0, nil, "").
func readClassOnly(r *sysread.Reader, want optional) ([]ClassDevice, error) {
	ents, err := r.ReadDir(sysattr.NeuronClassDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, &sysfs.Error{Subsystem: "neuron", File: sysattr.NeuronClassDir, Err: fserr.Cause(err)}
	}
	var out []ClassDevice
	var errs []error
	for _, e := range ents {
		n, ok := parseIndex(e.Name())
		if !ok {
			// Not neuron<N>: a name that looks like one, or that cannot
			// be printed, is reported (quoted), never printed raw.
			err := names.CheckName(e.Name())
			if err == nil && strings.HasPrefix(e.Name(), "neuron") {
				err = fmt.Errorf("%q is not neuron<N> with N of 0-1023", clip(e.Name()))
			}
			if err != nil {
				errs = append(errs, &sysfs.Error{Subsystem: "neuron", File: sysattr.NeuronClassDir, Err: fmt.Errorf("class device left out: %w", err)})
			}
			continue
		}
		dir := sysattr.NeuronClassDir + "/" + e.Name()
		d := ClassDevice{Index: n}
		fail := func(f string, err error) {
			errs = append(errs, &sysfs.Error{Subsystem: "neuron", Device: e.Name(), File: dir + "/" + f, Err: fserr.Cause(err)})
		}
		// A value that does not parse, or text that cannot be printed,
		// stays unknown (0, nil, ""), with the error.
		optional := func(f string, parse func(string) error) {
			s, err := r.ReadString(dir + "/" + f)
			if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink) {
				return // an older driver
			}
			if err == nil {
				err = parse(s)
			}
			if err != nil {
				fail(f, err)
			}
		}
		if want&optCoreCount != 0 {
			optional("core_count", func(s string) error {
				c, err := parseCoreCount(s)
				if err == nil {
					d.CoreCount = c
				}
				return err
			})
		}
		if want&optConnected != 0 {
			optional("connected_devices", func(s string) error {
				c, err := parseConnected(s)
				if err == nil {
					d.Connected = c
				}
				return err
			})
		}
		text := func(dst *string) func(string) error {
			return func(s string) error {
				err := names.CheckText(s)
				if err == nil {
					*dst = s
				}
				return err
			}
		}
		if want&optArch != 0 {
			optional("info/architecture/arch_type", text(&d.ArchType))
			optional("info/architecture/instance_type", text(&d.Instance))
			optional("info/architecture/device_name", text(&d.DeviceName))
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b ClassDevice) int { return a.Index - b.Index })
	return out, errors.Join(errs...)
}

// parseCoreCount parses core_count: the NeuronCores of one device, "2".
func parseCoreCount(s string) (int, error) {
	c, err := strconv.Atoi(s)
	if err != nil || c < 0 {
		return 0, fmt.Errorf("%q is not a core count", clip(s))
	}
	return c, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// parseConnected parses connected_devices, "12, 3, 4, 1".
func parseConnected(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return []int{}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 1023 {
			return nil, fmt.Errorf("%q is not a list of device indexes", clip(s))
		}
		out = append(out, n)
	}
	return out, nil
}

// Table is one instance family's wiring: Neuron index to PCI function, and
// Neuron index to the EFA it is attached to. The Neuron index comes from a
// firmware routing table, not from PCI probe order, so these tables, from
// AWS's published layouts, are the ground truth.
type Table struct {
	Family string
	// Size is the instance size the table describes ("32xlarge"); other
	// sizes of the family have fewer devices.
	Size string
	// NeuronPCI maps a Neuron index to its PCI function; nil where the
	// layout is not known (trn3).
	NeuronPCI map[int]pcie.Address
	// NeuronEFA maps a Neuron index to the PCI function of its EFA.
	NeuronEFA map[int]pcie.Address
}

// families maps an instance family to the family whose table it shares.
// trn3pds is the family the Neuron UltraServer operator names ("Trn3pds",
// awsdocs-neuron deploy/eks/ultraserver-operator); the Neuron driver's v4
// HAL (aws-neuron-driver neuron_dhal_v4.c) treats trn3s.48xlarge as that PDS
// platform, so trn3pds shares trn3s's table, which is trn3's.
var families = map[string]string{
	"trn1": "trn1", "trn1n": "trn1n",
	"trn2": "trn2", "trn2e": "trn2", "trn2u": "trn2",
	"trn3": "trn3", "trn3p": "trn3", "trn3pd98": "trn3", "trn3s": "trn3", "trn3pds": "trn3",
}

func addrs(spec string) map[int]pcie.Address {
	out := map[int]pcie.Address{}
	for i, s := range strings.Fields(spec) {
		a, err := pcie.ParseAddress(s)
		if err != nil {
			panic(err) // a table typo, caught by every test
		}
		out[i] = a
	}
	return out
}

// The tables of docs/hardware.md, one address per Neuron index 0-15.
var tables = map[string]*Table{
	"trn1": {Family: "trn1", Size: "32xlarge",
		NeuronPCI: addrs("10:1b.0 10:1e.0 a0:1b.0 a0:1e.0 20:1e.0 20:1c.0 90:1e.0 90:1c.0 20:1d.0 20:1b.0 90:1d.0 90:1b.0 10:1c.0 10:1d.0 a0:1c.0 a0:1d.0"),
		NeuronEFA: addrs("10:1a.0 10:1a.0 a0:1a.0 a0:1a.0 20:19.0 20:19.0 90:19.0 90:19.0 20:1a.0 20:1a.0 90:1a.0 90:1a.0 10:19.0 10:19.0 a0:19.0 a0:19.0"),
	},
	"trn1n": {Family: "trn1n", Size: "32xlarge",
		NeuronPCI: addrs("10:1b.0 10:1e.0 a0:1b.0 a0:1e.0 20:1e.0 20:1c.0 90:1e.0 90:1c.0 20:1d.0 20:1b.0 90:1d.0 90:1b.0 10:1c.0 10:1d.0 a0:1c.0 a0:1d.0"),
		NeuronEFA: addrs("10:17.0 10:1a.0 a0:17.0 a0:1a.0 20:19.0 20:18.0 90:19.0 90:18.0 20:17.0 20:1a.0 90:17.0 90:1a.0 10:19.0 10:18.0 a0:19.0 a0:18.0"),
	},
	"trn2": {Family: "trn2", Size: "48xlarge",
		NeuronPCI: addrs("cc:00.0 b5:00.0 b6:00.0 cb:00.0 6f:00.0 58:00.0 59:00.0 6e:00.0 9b:00.0 84:00.0 85:00.0 9a:00.0 f8:00.0 e1:00.0 e2:00.0 f7:00.0"),
		NeuronEFA: addrs("c9:00.0 b4:00.0 b3:00.0 ca:00.0 6c:00.0 57:00.0 56:00.0 6d:00.0 98:00.0 83:00.0 82:00.0 99:00.0 f5:00.0 e0:00.0 df:00.0 f6:00.0"),
	},
	"trn3": {Family: "trn3", Size: "48xlarge",
		NeuronEFA: addrs("be:00.0 a9:00.0 a8:00.0 bf:00.0 61:00.0 4c:00.0 4b:00.0 62:00.0 8d:00.0 78:00.0 77:00.0 8e:00.0 ea:00.0 d5:00.0 d4:00.0 eb:00.0"),
	},
}

// TableFor returns the table of an instance type's family
// ("trn2u.48xlarge" -> trn2), or false for a family without one.
func TableFor(instanceType string) (*Table, bool) {
	fam, _, _ := strings.Cut(instanceType, ".")
	t, ok := tables[families[fam]]
	return t, ok
}

// Indexes returns the table's Neuron indexes in order.
func (t *Table) Indexes() []int {
	if t == nil {
		return nil
	}
	var out []int
	for i := range t.NeuronEFA {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// NeuronsOf returns the Neuron indexes attached to the EFA at a, in order.
func (t *Table) NeuronsOf(a pcie.Address) []int {
	var out []int
	for _, i := range t.Indexes() {
		if t.NeuronEFA[i] == a {
			out = append(out, i)
		}
	}
	return out
}

// IndexOf returns the Neuron index of the PCI function at a, or -1.
func (t *Table) IndexOf(a pcie.Address) int {
	if t == nil {
		return -1
	}
	for i, p := range t.NeuronPCI {
		if p == a {
			return i
		}
	}
	return -1
}

// Groups are the resource.aws.com/devicegroup{1,4,8,16}_id values of one
// device.
type Groups struct {
	Group1  string `json:"devicegroup1_id"`
	Group4  string `json:"devicegroup4_id"`
	Group8  string `json:"devicegroup8_id"`
	Group16 string `json:"devicegroup16_id"`
}

// GroupID is AWS's devicegroupN_id of Neuron index i for N in 4, 8, 16: the
// first 16 hex digits of the SHA-256 of the sorted, de-duplicated EFA PCI
// addresses of Neuron devices floor(i/N)*N .. floor(i/N)*N+N-1, joined with
// ",".
func (t *Table) GroupID(i, n int) string {
	if t == nil || n <= 0 || i < 0 {
		return ""
	}
	lo := (i / n) * n
	var as []string
	for j, a := range t.NeuronEFA {
		if j >= lo && j-lo < n {
			as = append(as, a.String())
		}
	}
	slices.Sort(as)
	as = slices.Compact(as)
	sum := sha256.Sum256([]byte(strings.Join(as, ",")))
	return hex.EncodeToString(sum[:])[:16]
}

// NeuronGroups returns the groups of Neuron index i: group 1 is the PCI
// address of its EFA, as on that EFA, so the two match.
func (t *Table) NeuronGroups(i int) (Groups, bool) {
	if t == nil {
		return Groups{}, false
	}
	efa, ok := t.NeuronEFA[i]
	if !ok {
		return Groups{}, false
	}
	return Groups{Group1: efa.String(), Group4: t.GroupID(i, 4), Group8: t.GroupID(i, 8), Group16: t.GroupID(i, 16)}, true
}

// EFAGroups returns the groups of the EFA at a, from the lowest Neuron index
// attached to it; false when no Neuron device is attached to it.
func (t *Table) EFAGroups(a pcie.Address) (Groups, bool) {
	ns := t.NeuronsOf(a)
	if len(ns) == 0 {
		return Groups{}, false
	}
	i := ns[0]
	return Groups{Group1: a.String(), Group4: t.GroupID(i, 4), Group8: t.GroupID(i, 8), Group16: t.GroupID(i, 16)}, true
}
