package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/efakit/efakit/plugin/cdi"
)

// envMOFED is the variable NVIDIA's device plugin sets in a container when
// its MOFED mode is on. NVIDIA's container runtime reads it from the
// container's environment and adds every /dev/infiniband/uverbs* of the
// node (and rdma_cm) to the container, whatever its claims hold.
const envMOFED = "NVIDIA_MOFED"

// The fixes of the three ways a container comes to hold uverbs nodes its
// claims did not give it, each starting with the way it fixes. The nodes
// are the container's from its start: each fix holds for new pods.
const (
	fixMOFED = "NVIDIA's device plugin in MOFED mode: turn the mode off, Helm value mofedEnabled=false of its nvidia-device-plugin chart " +
		"(flag --mofed-enabled=false, environment MOFED_ENABLED=false; on by default in k8s-device-plugin v0.19.0 to v0.19.2, off from v0.19.3), then recreate the pod"
	fixHostPath   = "a hostPath volume of /dev/infiniband (or /dev): remove it from the pod, and claim EFAs of efakit's DeviceClass instead"
	fixPrivileged = "a privileged container: it sees every device node of the node, so drop privileged: true, or accept it and set env: libfabric " +
		"in efakit's opaque configuration of the claim, so that FI_EFA_IFACE names the claimed EFAs for libfabric"
)

// nodeSource is a way a container holds uverbs nodes its claims did not
// give it, found in the container.
type nodeSource struct {
	// sign is what shows it here.
	sign string
	// fix says what to do about it.
	fix string
	// certain is false for a sign that only suggests the source.
	certain bool
}

// unclaimedDevices checks, in a pod, that the container can open the uverbs
// nodes of no EFA but those its dra.net claims gave it, as the device
// metadata names them. More come from NVIDIA's device plugin in MOFED mode
// (every /dev/infiniband/uverbs* of the node into every GPU container), a
// hostPath volume of /dev/infiniband, or a privileged container; libfabric
// then uses other pods' EFAs beside the container's own. Other RDMA
// devices (mlx5 on p6-b200) are named but not judged: efakit gives only
// EFAs, so no dra.net claim of efakit's names them, and another driver may
// have given them rightly.
func (f *facts) unclaimedDevices() Check {
	if f.o.Place == OnNode {
		return Check{ID: CheckUnclaimedDevices, Status: Skip, Message: "on a node: only a container holds EFAs it did not claim (run efakit doctor in the pod)"}
	}
	held := f.openable(true)
	var others []*verbsDevice
	for _, v := range f.openable(false) {
		if !v.EFA {
			others = append(others, v)
		}
	}
	var note string
	if len(others) > 0 {
		note = fmt.Sprintf("; %s openable too, not judged: %s (%s) are no EFAs, and efakit gives only EFAs",
			plural(len(others), "other uverbs node"), uverbsRanges(others), listNames(rdmaNames(others), 4))
	}
	if len(held) == 0 {
		return Check{ID: CheckUnclaimedDevices, Status: Pass, Message: "this container can open no EFA's uverbs node" + note}
	}
	drv := f.o.DriverName
	heldText := fmt.Sprintf("this container can open %s (%s)", plural(len(held), "EFA"), uverbsRanges(held))
	m := f.meta

	if len(m.errs) > 0 || len(m.bare) > 0 {
		return Check{ID: CheckUnclaimedDevices, Status: Skip,
			Message: fmt.Sprintf("%s, but which its claims gave is not known: %s metadata that could not be read or names no EFA (device-metadata says which)", heldText, drv) + note}
	}
	if len(m.files) == 0 {
		where := fmt.Sprintf("no %s metadata file under %s", drv, m.dir)
		if m.absent {
			where = fmt.Sprintf("no %s", m.dir)
		}
		msg := fmt.Sprintf("%s, and %s says which its claims gave (no %s claim, or the kubelet mounts no device metadata)", heldText, where, drv)
		// Without metadata only a source that gives every node, whatever
		// the claims, is worth a warning: anything else would be a guess.
		sources, unread := f.nodeSources()
		var certain []nodeSource
		for _, s := range sources {
			if s.certain {
				certain = append(certain, s)
			}
		}
		if len(certain) == 0 {
			return Check{ID: CheckUnclaimedDevices, Status: Skip, Message: msg + ": not judged" + unreadText(unread) + note}
		}
		return Check{ID: CheckUnclaimedDevices, Status: Warn,
			Message: msg + "; " + signs(certain) + ", which gives every uverbs node of the node" + unreadText(unread) + note,
			Fix:     fixes(certain)}
	}

	var unclaimed, claimed []*verbsDevice
	for _, v := range held {
		if _, ok := m.named[v.RDMA]; ok {
			claimed = append(claimed, v)
		} else {
			unclaimed = append(unclaimed, v)
		}
	}
	if len(unclaimed) == 0 {
		return Check{ID: CheckUnclaimedDevices, Status: Pass,
			Message: fmt.Sprintf("this container can open only EFAs its %s claims gave it: %s (%s)", drv, uverbsRanges(held), listNames(rdmaNames(held), maxListed)) + note}
	}
	msg := fmt.Sprintf("this container can open %s its %s claims did not give it: %s (%s)",
		plural(len(unclaimed), "EFA"), drv, uverbsRanges(unclaimed), listNames(rdmaNames(unclaimed), maxListed))
	if len(claimed) > 0 {
		msg += fmt.Sprintf(", beside the %d they gave (%s)", len(claimed), uverbsRanges(claimed))
	}
	// efakit's env: libfabric names the claimed EFAs to libfabric: the
	// container contract's answer for a privileged container. MOFED mode
	// and a hostPath volume have a plainer fix, and still warn.
	iface, set := f.env[cdi.EnvIface]
	confined := set && sameSet(splitList(iface, ","), m.namedEFAs())
	if confined {
		msg += "; FI_EFA_IFACE names exactly the claimed EFAs (efakit's env: libfabric), so libfabric uses no other"
	}
	sources, unread := f.nodeSources()
	if len(sources) == 0 {
		msg += "; none of the usual sources shows here (NVIDIA's device plugin in MOFED mode, a hostPath volume of /dev/infiniband, a privileged container)"
		sources = []nodeSource{{fix: fixMOFED}, {fix: fixHostPath}, {fix: fixPrivileged}}
	} else {
		msg += "; " + signs(sources)
	}
	msg += unreadText(unread) + note
	if confined && !anyCertain(sources) {
		return Check{ID: CheckUnclaimedDevices, Status: Pass, Message: msg}
	}
	return Check{ID: CheckUnclaimedDevices, Status: Warn, Message: msg, Fix: fixes(sources)}
}

// nodeSources looks in the container for the three ways it comes to hold
// uverbs nodes its claims did not give it, and returns those it finds and
// the errors of the files it could not read.
func (f *facts) nodeSources() ([]nodeSource, []error) {
	var found []nodeSource
	var unread []error
	if f.env[envMOFED] == "enabled" {
		found = append(found, nodeSource{sign: envMOFED + "=enabled in this container's environment (NVIDIA's device plugin in MOFED mode)", fix: fixMOFED, certain: true})
	}
	mounts, err := devMounts(filepath.Join(f.o.ProcDir, "self", "mountinfo"), f.o.DevDir)
	if err != nil {
		unread = append(unread, err)
	}
	if len(mounts) > 0 {
		found = append(found, nodeSource{sign: listNames(mounts, 2) + " (a hostPath volume)", fix: fixHostPath, certain: true})
	}
	sysAdmin, err := boundingHas(filepath.Join(f.o.ProcDir, "self", "status"), unix.CAP_SYS_ADMIN)
	if err != nil {
		unread = append(unread, err)
	}
	if sysAdmin {
		found = append(found, nodeSource{sign: "CAP_SYS_ADMIN in this container's capability bounding set (a privileged container, likely)", fix: fixPrivileged})
	}
	return found, unread
}

// devMounts reads a mountinfo file for what a volume puts at the device
// nodes' place (parseDevMounts). A file that is not there is no error: no
// mount is known.
func devMounts(path, devDir string) ([]string, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err // *fs.PathError names the file
	}
	defer fh.Close()
	out, err := parseDevMounts(fh, devDir)
	if err != nil {
		return out, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// parseDevMounts finds, in a mountinfo file's lines, a mount at
// <devDir>/infiniband, or a devtmpfs at devDir (the node's own /dev). A
// container's /dev is a tmpfs the runtime fills node by node, and CDI adds
// nodes, never a directory mount. Lines it cannot read are passed over.
func parseDevMounts(r io.Reader, devDir string) ([]string, error) {
	ib := filepath.Join(devDir, "infiniband")
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /root /mount/point rw,noatime shared:1 - fstype source rw
		before, after, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(before), strings.Fields(after)
		if !ok || len(fields) < 5 || len(tail) < 1 {
			continue
		}
		point, fstype := filepath.Clean(unescapeMount(fields[4])), tail[0]
		if point == ib || (point == filepath.Clean(devDir) && fstype == "devtmpfs") {
			// The root stays escaped: a host path could hold a newline.
			out = append(out, fmt.Sprintf("%s is a mount of %s %s", point, fstype, fields[3]))
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes the kernel's octal escapes in a mountinfo path
// (\040 for a space, \011, \012, \134).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// boundingHas reports whether the CapBnd line of a /proc/<pid>/status file
// holds the capability (parseCapBnd). A file that is not there is no
// error.
func boundingHas(path string, capability int) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err // *fs.PathError names the file
	}
	set, err := parseCapBnd(string(data))
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return set&(1<<capability) != 0, nil
}

// parseCapBnd reads the capability bounding set from a status file's
// CapBnd line (hexadecimal). A privileged container's holds every
// capability; the runtime's default set lacks CAP_SYS_ADMIN. No line is
// an empty set.
func parseCapBnd(status string) (uint64, error) {
	for _, line := range strings.Split(status, "\n") {
		v, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("CapBnd %q: %w", strings.TrimSpace(v), err)
		}
		return set, nil
	}
	return 0, nil
}

// signs joins what shows each source.
func signs(sources []nodeSource) string {
	out := make([]string, len(sources))
	for i, s := range sources {
		out[i] = s.sign
	}
	return strings.Join(out, ", ")
}

// fixes joins the sources' fixes.
func fixes(sources []nodeSource) string {
	out := make([]string, len(sources))
	for i, s := range sources {
		out[i] = s.fix
	}
	return strings.Join(out, "; ")
}

func anyCertain(sources []nodeSource) bool {
	for _, s := range sources {
		if s.certain {
			return true
		}
	}
	return false
}

// unreadText says which files the sources were not looked for in.
func unreadText(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	return " (not read: " + listNames(errorStrings(errs), 2) + ")"
}
