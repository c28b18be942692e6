// Package cdi writes the Container Device Interface (CDI) specs through
// which a container runtime gives a pod the EFAs of a prepared
// ResourceClaim: one spec file per claim, holding one CDI device per
// allocated device of each request of the claim (an EFA, a group of EFAs,
// a share of an EFA), so that the kubelet, which reports a device's
// health under its CDI device ID, shows each one's. The runtime
// (containerd, CRI-O) reads the spec directory itself; the kubelet only
// passes it the device IDs.
//
// A CDI device holds its uverbs character devices and, only when the
// caller asks for it, the request's environment variables. CDI applies a device's
// variables by name, replacing what the container had, so the last of
// several devices injected into one container wins: variables that differ
// between devices must never be set where several devices meet (see the
// container contract in docs/container-contract.md).
package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/efakit/efakit/internal/atomicfile"
)

// Class is the CDI device class of every spec the Writer writes: the kind
// is "<driver name>/efa", so a device ID reads
// "dra.net/efa=<uid>-<request>_<device>".
const Class = "efa"

// MaxClaimUIDLength bounds a claim UID. Kubernetes UIDs are 36-character
// UUIDs; 64 leaves room without letting the API make long file names.
const MaxClaimUIDLength = 64

// maxRDMANameLength is the kernel's IB_DEVICE_NAME_MAX: no RDMA device name
// is longer.
const maxRDMANameLength = 64

// The libfabric variables a CDI device may set (only when the claim's
// configuration asks for them). FI_EFA_IFACE restricts which EFAs libfabric
// uses; it does not restrict which it opens: since ofiwg/libfabric PR 10990
// the EFA provider opens every RDMA device rdma-core lists (to collect their
// GIDs), and rdma-core lists every device of the host in the kernel's shared
// RDMA namespace mode. It matters where a container sees more EFAs than it
// was given (a privileged container sees all of /dev).
const (
	EnvProvider = "FI_PROVIDER"
	EnvIface    = "FI_EFA_IFACE"
)

// uverbsDir is where the container sees uverbs character devices; the
// same path as on the host, where the kernel's devtmpfs puts them.
const uverbsDir = "/dev/infiniband/"

// Device is one EFA of a request, as the container sees it.
type Device struct {
	// Name is the RDMA device name (rdmap79s0, or efa_0 without rdma-core's
	// udev rename), listed in FI_EFA_IFACE.
	Name string
	// Uverbs is the uverbs character device's name (uverbs3), made
	// /dev/infiniband/uverbs3 in the container.
	Uverbs string
	// Major and Minor are the character device's number, from sysfs.
	Major, Minor uint32
}

// Request is what a request's CDI devices give a container: the uverbs
// nodes of its EFAs, and environment variables ("NAME=value") only where the
// caller sets them.
type Request struct {
	Devices []Device
	Env     []string
	// Allocated are the request's allocated devices (an EFA, a group of
	// EFAs, a share of an EFA), each a CDI device of its own,
	// "<claim UID>-<request>_<name>" (AllocatedName), with the nodes of
	// its EFAs (some of Devices) and the request's Env. The kubelet keeps
	// one health entry per CDI device ID in a pod's status: one ID per
	// allocated device shows each one's health. Without them the request
	// is one CDI device, "<claim UID>-<request>" (DeviceName), with every
	// node of Devices.
	Allocated []Allocated
	// Whole asks for the request's one CDI device beside the allocated
	// devices': the ID that efakit gave the kubelet before it gave one per
	// allocated device, which containers of a claim prepared then still
	// start with.
	Whole bool
}

// Allocated is one allocated device of a request and its EFAs.
type Allocated struct {
	// Name is the allocated device's name, as the CDI device name ends:
	// letters, digits, '-', '_', '.' and ':'.
	Name    string
	Devices []Device
}

// Writer writes, reads back and removes the CDI specs of claims in one spec
// directory. It holds no state besides its configuration, so it is safe for
// concurrent use; two concurrent Writes of the same claim leave one of the
// two specs, whole.
type Writer struct {
	// Sync, when set, is called instead of (*os.File).Sync for each fsync
	// of a spec write (there is none; see specDurability): tests count
	// them through it. Set before first use.
	Sync func(*os.File) error

	dir    string
	vendor string
}

// specDurability: a spec is written with no fsync. The rename makes it
// appear whole to the runtime at once, and a plugin that crashes loses no
// write, since the page cache outlives the process. Only a power loss or a
// kernel crash could leave a torn spec, and that is a reboot: the CDI
// directory is a tmpfs on a usual node, and otherwise the plugin's start
// removes every spec of a claim the checkpoint does not hold for this boot,
// which is every claim of the boot before, while the kubelet prepares the
// claims of the new boot again, writing their specs anew.
const specDurability = atomicfile.SyncNone

// options are the atomicfile options of a spec write.
func (w *Writer) options(check func(tmp string) error) atomicfile.Options {
	return atomicfile.Options{Check: check, Durability: specDurability, Sync: w.Sync}
}

// ValidateClaimUID checks that a claim UID can name a file: 1 to
// MaxClaimUIDLength characters out of [A-Za-z0-9-]. The UID comes from the
// API server and becomes part of a path under the spec directory, so
// nothing else (no '/', '.', NUL or space) may pass.
func ValidateClaimUID(uid string) error {
	if uid == "" {
		return errors.New("cdi: empty claim UID")
	}
	if len(uid) > MaxClaimUIDLength {
		// Not quoted whole: it came from the API and may be huge.
		return fmt.Errorf("cdi: claim UID of %d bytes, more than %d", len(uid), MaxClaimUIDLength)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("cdi: claim UID %q: invalid character %q at %d", uid, c, i)
		}
	}
	return nil
}

// SpecPath is the path of a claim's spec file, after checking the claim
// UID: "<dir>/<driver name>-efa_<claim UID>.json", the CDI library's
// transient spec name, since the spec lives as long as the claim is
// prepared. It depends on the claim UID alone, so Remove finds the file
// after a restart even without a checkpoint.
func (w *Writer) SpecPath(claimUID string) (string, error) {
	if err := ValidateClaimUID(claimUID); err != nil {
		return "", err
	}
	name := cdiapi.GenerateTransientSpecName(w.vendor, Class, claimUID) + ".json"
	return filepath.Join(w.dir, name), nil
}

// DeviceName is the CDI device name of a request of a claim,
// "<claim UID>-<request>", unqualified.
func DeviceName(claimUID, request string) string { return claimUID + "-" + request }

// AllocatedName is the CDI device name of an allocated device of a
// request, "<claim UID>-<request>_<allocated>", unqualified. A request
// name (a DNS label) holds no '_', so it never equals another request's
// DeviceName.
func AllocatedName(claimUID, request, allocated string) string {
	return DeviceName(claimUID, request) + "_" + allocated
}

// ID is the fully qualified CDI device ID of a device name of the
// Writer's specs: "dra.net/efa=<name>".
func (w *Writer) ID(name string) string { return parser.QualifiedName(w.vendor, Class, name) }

// Write writes the claim's spec, replacing any earlier one: for each
// request, one CDI device per allocated device (AllocatedName), whose
// edits add one character device per EFA (in the order given) and the
// request's environment variables, if any; or, for a request without
// allocated devices or that asks for it (Whole), one CDI device of all its
// EFAs, "<claim UID>-<request>". It returns the fully qualified CDI device
// ID ("dra.net/efa=<uid>-<request>") of each request written whole;
// ID(AllocatedName(...)) is an allocated device's. These are the strings
// the kubelet hands the runtime.
//
// The spec is written to a temporary file in the spec directory (a name the
// runtime's CDI cache ignores), validated by the CDI library from that
// file, and renamed over the final name, so the runtime never reads a
// partial or invalid spec; no fsync (see specDurability). The directory is created if missing, since a
// tmpfs /var/run starts empty after a reboot.
func (w *Writer) Write(claimUID string, requests map[string]Request) (map[string]string, error) {
	path, err := w.SpecPath(claimUID)
	if err != nil {
		return nil, err
	}
	spec, ids, err := w.spec(claimUID, requests)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("cdi: claim %s: encoding spec: %w", claimUID, err)
	}
	err = atomicfile.Write(path, data, w.options(func(tmp string) error {
		// The library's own check of the very bytes the runtime will read:
		// names, version against content, edits.
		got, err := cdiapi.ReadSpec(tmp, 0)
		if err != nil {
			return fmt.Errorf("invalid spec: %w", err)
		}
		if got.GetVendor() != w.vendor || got.GetClass() != Class {
			return fmt.Errorf("invalid spec: kind %q read back, want %q", got.Kind, w.Kind())
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("cdi: claim %s: writing spec %s: %w", claimUID, path, err)
	}
	return ids, nil
}

// spec builds the claim's spec and the requests' device IDs.
func (w *Writer) spec(claimUID string, requests map[string]Request) (*specs.Spec, map[string]string, error) {
	if len(requests) == 0 {
		return nil, nil, fmt.Errorf("cdi: claim %s: no requests", claimUID)
	}
	// Sorted, so that the same claim always gives the same file.
	names := make([]string, 0, len(requests))
	for r := range requests {
		names = append(names, r)
	}
	slices.Sort(names)

	spec := &specs.Spec{Kind: w.Kind(), Devices: make([]specs.Device, 0, len(names))}
	ids := make(map[string]string, len(names))
	for _, req := range names {
		r := requests[req]
		dev, err := cdiDevice(claimUID, req, DeviceName(claimUID, req), r.Devices, r.Env)
		if err != nil {
			return nil, nil, err
		}
		if r.Whole || len(r.Allocated) == 0 {
			spec.Devices = append(spec.Devices, dev)
			ids[req] = w.ID(dev.Name)
		}
		seen := map[string]bool{}
		for _, a := range r.Allocated {
			if a.Name == "" || seen[a.Name] {
				return nil, nil, fmt.Errorf("cdi: claim %s: request %q: allocated device %q: empty or given twice", claimUID, req, a.Name)
			}
			seen[a.Name] = true
			for _, d := range a.Devices {
				if !slices.Contains(r.Devices, d) {
					// Its node would reach the container without the
					// request's FI_EFA_IFACE naming it: a caller's bug.
					return nil, nil, fmt.Errorf("cdi: claim %s: request %q: allocated device %q: EFA %s (%s) is not one of the request's", claimUID, req, a.Name, d.Name, d.Uverbs)
				}
			}
			dev, err := cdiDevice(claimUID, req, AllocatedName(claimUID, req, a.Name), a.Devices, r.Env)
			if err != nil {
				return nil, nil, err
			}
			spec.Devices = append(spec.Devices, dev)
		}
	}
	// The oldest version that can express the spec, so the oldest runtime
	// that can run it accepts it: 0.3.0, or 0.5.0 when the UID (and so a
	// device name) starts with a digit.
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("cdi: claim %s: spec version: %w", claimUID, err)
	}
	spec.Version = v
	return spec, ids, nil
}

// cdiDevice is the CDI device name of a request, or of an allocated
// device of it: the nodes of devs and the variables env.
func cdiDevice(claimUID, req, name string, devs []Device, env []string) (specs.Device, error) {
	if err := parser.ValidateDeviceName(name); err != nil {
		return specs.Device{}, fmt.Errorf("cdi: claim %s: request %q does not make a CDI device name: %w", claimUID, req, err)
	}
	if len(devs) == 0 {
		return specs.Device{}, fmt.Errorf("cdi: claim %s: request %q has no EFAs", claimUID, req)
	}
	nodes := make([]*specs.DeviceNode, 0, len(devs))
	for i, d := range devs {
		if err := checkDevice(d); err != nil {
			return specs.Device{}, fmt.Errorf("cdi: claim %s: request %q: EFA %d: %w", claimUID, req, i, err)
		}
		for _, prev := range devs[:i] {
			// Two device nodes at one path would be one in the container,
			// and FI_EFA_IFACE would name the EFA twice: a caller's bug.
			if prev.Uverbs == d.Uverbs || prev.Name == d.Name {
				return specs.Device{}, fmt.Errorf("cdi: claim %s: request %q: EFA %s (%s) given twice", claimUID, req, d.Name, d.Uverbs)
			}
		}
		nodes = append(nodes, &specs.DeviceNode{
			Path:  uverbsDir + d.Uverbs,
			Type:  "c",
			Major: int64(d.Major),
			Minor: int64(d.Minor),
			// Read and write, not mknod: the runtime makes the node.
			Permissions: "rw",
		})
	}
	if err := checkEnv(env); err != nil {
		return specs.Device{}, fmt.Errorf("cdi: claim %s: request %q: %w", claimUID, req, err)
	}
	if len(env) > 0 {
		env = slices.Clone(env)
	} else {
		env = nil
	}
	return specs.Device{
		Name:           name,
		ContainerEdits: specs.ContainerEdits{Env: env, DeviceNodes: nodes},
	}, nil
}

// checkEnv checks environment variables: NAME=value, NAME a shell name,
// each name once (two values of one name in one device would leave the
// container with whichever the runtime applies last).
func checkEnv(env []string) error {
	seen := map[string]bool{}
	for _, e := range env {
		name, _, ok := strings.Cut(e, "=")
		if !ok || !isEnvName(name) {
			return fmt.Errorf("environment variable %q is not NAME=value", e)
		}
		if seen[name] {
			return fmt.Errorf("environment variable %s set twice", name)
		}
		seen[name] = true
		if strings.ContainsRune(e, 0) {
			return fmt.Errorf("environment variable %s holds a NUL byte", name)
		}
	}
	return nil
}

func isEnvName(s string) bool {
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Iface is the value of FI_EFA_IFACE naming the given EFAs, in order.
func Iface(devs []Device) string {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	return strings.Join(names, ",")
}

// checkDevice checks that an EFA's names can go into a path and into
// FI_EFA_IFACE unchanged.
func checkDevice(d Device) error {
	n, ok := strings.CutPrefix(d.Uverbs, "uverbs")
	if !ok || n == "" || strings.TrimLeft(n, "0123456789") != "" {
		// The kernel names every uverbs device uverbsN; anything else
		// could steer the device node's path.
		return fmt.Errorf("uverbs device %q is not uverbsN", d.Uverbs)
	}
	if _, err := strconv.ParseUint(n, 10, 32); err != nil {
		return fmt.Errorf("uverbs device %q: %w", d.Uverbs, err)
	}
	if d.Name == "" || len(d.Name) > maxRDMANameLength {
		return fmt.Errorf("RDMA device name %q: empty or longer than %d", d.Name, maxRDMANameLength)
	}
	for i := 0; i < len(d.Name); i++ {
		// A comma would split FI_EFA_IFACE; blanks and control bytes
		// are no RDMA name the kernel makes.
		if c := d.Name[i]; c == ',' || c <= ' ' || c >= 0x7f {
			return fmt.Errorf("RDMA device name %q: invalid character %q", d.Name, c)
		}
	}
	return nil
}
