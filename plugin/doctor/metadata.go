package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// maxMetadataFile bounds the read of one metadata file: a claim holds at
// most 32 devices of at most 32 attributes, far below this.
const maxMetadataFile = 4 << 20

// metadataFacts is what the driver's device metadata files in a container
// say about its EFAs.
type metadataFacts struct {
	dir    string
	absent bool     // no metadata directory: not in a pod with claims
	files  []string // the driver's files, relative to dir
	// named maps each RDMA name the files give (rdmaDevice, or a group's
	// members) to the file that names it; order keeps the files' order.
	named  map[string]string
	order  []string
	uverbs map[string]string // RDMA name -> uverbsDevice, where given
	bare   []string          // devices with neither rdmaDevice nor members
	errs   []error           // files that could not be read or decoded
}

// namedEFAs lists the RDMA names the files give, in file order.
func (m *metadataFacts) namedEFAs() []string { return m.order }

// readMetadata reads the driver's metadata files under dir: one per request
// of a claim, at resourceclaims/<claim>/<request>/<driver>-metadata.json
// or resourceclaimtemplates/<pod claim name>/<request>/... Each is a JSON
// stream of one DeviceMetadata per API version; the first one this library
// knows is decoded.
func readMetadata(dir, driverName string) *metadataFacts {
	m := &metadataFacts{dir: dir, named: map[string]string{}, uverbs: map[string]string{}}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		m.absent = true
		return m
	} else if err != nil {
		m.errs = append(m.errs, err)
		return m
	}
	for _, sub := range []string{metadata.ResourceClaimsSubDir, metadata.ResourceClaimTemplatesSubDir} {
		// Driver names are DNS subdomains: no glob metacharacters.
		matches, err := filepath.Glob(filepath.Join(dir, sub, "*", "*", metadata.MetadataFileName(driverName)))
		if err != nil {
			m.errs = append(m.errs, fmt.Errorf("listing %s: %w", filepath.Join(dir, sub), err))
			continue
		}
		for _, path := range matches {
			rel, _ := filepath.Rel(dir, path)
			m.files = append(m.files, rel)
			dm, err := decodeMetadataFile(path)
			if err != nil {
				m.errs = append(m.errs, err)
				continue
			}
			m.add(dm, driverName, rel)
		}
	}
	return m
}

// decodeMetadataFile decodes the first DeviceMetadata of a file that this
// library knows, as the devicemetadata package's readers do.
func decodeMetadataFile(path string) (*metadata.DeviceMetadata, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err // *fs.PathError names the file
	}
	defer fh.Close()
	var dm metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(io.LimitReader(fh, maxMetadataFile)), &dm); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return &dm, nil
}

// add records the EFAs one file names: a single EFA's rdmaDevice and
// uverbsDevice, a group's members.
func (m *metadataFacts) add(dm *metadata.DeviceMetadata, driverName, file string) {
	name := func(rdma string) {
		if _, seen := m.named[rdma]; !seen {
			m.named[rdma] = file
			m.order = append(m.order, rdma)
		}
	}
	for _, r := range dm.Requests {
		for _, d := range r.Devices {
			if d.Driver != driverName {
				continue
			}
			rdma, isEFA := stringAttr(d, driverName, resources.AttrRDMADev)
			members, isGroup := stringAttr(d, driverName, resources.AttrMembers)
			if isEFA {
				name(rdma)
				if u, ok := stringAttr(d, driverName, resources.AttrUverbs); ok {
					m.uverbs[rdma] = u
				}
			}
			if isGroup {
				for _, n := range splitList(members, ",") {
					name(n)
				}
			}
			if !isEFA && !isGroup {
				m.bare = append(m.bare, fmt.Sprintf("%s (%s)", d.Name, file))
			}
		}
	}
}

// stringAttr returns a string attribute of a device in the driver's
// domain, written either unqualified ("rdmaDevice", as the driver publishes
// it) or qualified ("dra.net/rdmaDevice").
func stringAttr(d metadata.Device, driverName string, name resourceapi.QualifiedName) (string, bool) {
	for _, k := range []resourceapi.QualifiedName{name, resourceapi.QualifiedName(driverName + "/" + string(name))} {
		if a, ok := d.Attributes[k]; ok && a.StringValue != nil && *a.StringValue != "" {
			return *a.StringValue, true
		}
	}
	return "", false
}

// deviceMetadata checks that every EFA the pod's metadata names has an
// openable uverbs node here, with the uverbs device the metadata gives.
// EFA nodes the container can open beyond those are unclaimedDevices'.
func (f *facts) deviceMetadata() Check {
	if f.o.Place == OnNode {
		return Check{ID: CheckDeviceMetadata, Status: Skip, Message: "on a node: device metadata is mounted into containers only"}
	}
	m := f.meta
	if m.absent {
		return Check{ID: CheckDeviceMetadata, Status: Skip, Message: fmt.Sprintf("not in a pod with efakit's claims (no %s)", m.dir)}
	}
	held := rdmaNames(f.openable(true))
	var parts []part
	if len(m.errs) > 0 {
		parts = append(parts, part{Fail, fmt.Sprintf("%s not read: %s", plural(len(m.errs), "metadata file"), listNames(errorStrings(m.errs), 2)),
			"the kubelet plugin helper writes these files: check efakit's plugin log for the claim"})
	}
	if len(m.files) == 0 {
		if len(m.errs) > 0 {
			return combine(CheckDeviceMetadata, parts...)
		}
		if len(held) == 0 {
			return Check{ID: CheckDeviceMetadata, Status: Skip, Message: fmt.Sprintf("no %s metadata file under %s: this pod holds no %s claim", f.o.DriverName, m.dir, f.o.DriverName)}
		}
		return Check{ID: CheckDeviceMetadata, Status: Warn,
			Message: fmt.Sprintf("this container can open %s (%s), but no %s metadata file under %s names them", plural(len(held), "EFA"), listNames(held, maxListed), f.o.DriverName, m.dir),
			Fix:     "device metadata is off, or the EFAs came from elsewhere (NVIDIA's device plugin in MOFED mode, a hostPath volume, a privileged container, AWS's device plugin; unclaimed-devices looks for the first three): give EFAs through efakit's claims"}
	}
	if len(m.bare) > 0 {
		parts = append(parts, part{Warn, fmt.Sprintf("%s without an rdmaDevice or members attribute: %s", plural(len(m.bare), "device"), listNames(m.bare, 4)),
			"the driver that wrote them is not efakit's, or an old version: check the claim's driver"})
	}

	var notOpenable, notInSysfs, renumbered []string
	for _, rdma := range m.order {
		v := f.verbsOf(rdma)
		switch {
		case v == nil:
			notInSysfs = append(notInSysfs, fmt.Sprintf("%s (%s)", rdma, m.named[rdma]))
		case v.Node.State != nodeOpenable:
			notOpenable = append(notOpenable, fmt.Sprintf("%s (%s: %s, in %s)", rdma, v.Path, stateText(v.Node.State), m.named[rdma]))
		}
		if u, ok := m.uverbs[rdma]; ok && v != nil && u != v.Name {
			renumbered = append(renumbered, fmt.Sprintf("%s is %s in the metadata, %s in sysfs", rdma, u, v.Name))
		}
	}
	if len(notOpenable) > 0 {
		parts = append(parts, part{Fail, "the metadata names EFAs this container cannot open: " + listNames(notOpenable, 4),
			"the runtime did not apply the claim's CDI device: check CDI in the runtime (containerd: enable_cdi, cdi_spec_dirs) and efakit's plugin log for the claim"})
	}
	if len(notInSysfs) > 0 {
		parts = append(parts, part{Fail, "the metadata names EFAs sysfs does not hold with a uverbs device: " + listNames(notInSysfs, 4),
			"the EFA is gone from the node or was renamed: recreate the pod"})
	}
	if len(renumbered) > 0 {
		parts = append(parts, part{Fail, listNames(renumbered, 4),
			"the uverbs devices were numbered again since the claim was prepared (a reboot, or an efa or ib_uverbs module reload): recreate the pod"})
	}
	if len(notOpenable)+len(notInSysfs)+len(renumbered) == 0 {
		parts = append(parts, part{Pass, fmt.Sprintf("%s name %s (%s), each openable here",
			plural(len(m.files), f.o.DriverName+" metadata file"), plural(len(m.order), "EFA"), listNames(m.order, maxListed)), ""})
	}
	return combine(CheckDeviceMetadata, parts...)
}

// stateText says in a word or two what is wrong with a node.
func stateText(s nodeState) string {
	switch s {
	case nodeAbsent:
		return "absent"
	case nodeNotCharDevice:
		return "not a character device"
	case nodeWrongNumber:
		return "wrong device number"
	case nodeStatFailed, nodeOpenFailed:
		return "cannot be opened"
	}
	return "openable"
}
