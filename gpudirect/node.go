package gpudirect

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysattr"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// Files the node facts come from: sysattr.NVIDIADriverVersion under the
// sysfs root, the others under the proc root.
const (
	// nVIDIAParamsFile lists the nvidia module's parameters as it took
	// them, "Name: value" a line, without the NVreg_ prefix.
	nVIDIAParamsFile = "driver/nvidia/params"
	// kernelReleaseFile is the running kernel's release ("6.1.119-...").
	kernelReleaseFile = "sys/kernel/osrelease"
)

// topoCheckOverride is the nvidia module parameter that, before the R595
// driver branch, let a NIC outside the GPU's IOMMU group attach dma-buf
// to GPU memory on a coherent (Grace) platform.
const topoCheckOverride = "GrdmaPciTopoCheckOverride"

// Node is what the node's kernel and drivers say about GPUDirect RDMA,
// beside the topology. Each field's zero value means unknown.
type Node struct {
	// NVIDIAVersion is sysattr.NVIDIADriverVersion, "" when the file is absent (the
	// module not loaded, or a capture without it) or damaged.
	NVIDIAVersion string
	// NVIDIAParams are nVIDIAParamsFile's, nil when not read (no proc
	// root, the module not loaded) or damaged.
	NVIDIAParams map[string]string
	// KernelRelease is kernelReleaseFile's, "" when not read.
	KernelRelease string
	// EFADriverVersion is sysattr.EFADriverVersion: the out-of-tree efa
	// driver's version, "" for the in-tree driver (or a capture without
	// it).
	EFADriverVersion string
}

// ReadNode reads the node's facts: the nvidia and efa modules' versions
// from sysfs, the nvidia module's parameters and the kernel release from
// proc when proc is not nil. A file that is absent leaves its fact
// unknown; one that cannot be read or parsed does too, with an error.
func ReadNode(fsys fs.FS, proc fs.FS) (Node, error) {
	r := sysread.New(fsys)
	var n Node
	var errs []error
	absent := func(err error) bool {
		return errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink)
	}
	switch s, err := r.ReadString(sysattr.NVIDIADriverVersion); {
	case err == nil && sysattr.CheckModuleVersion(s) == nil:
		n.NVIDIAVersion = s
	case err == nil:
		errs = append(errs, fmt.Errorf("%s: %w", sysattr.NVIDIADriverVersion, sysattr.CheckModuleVersion(s)))
	case !absent(err):
		errs = append(errs, fmt.Errorf("%s: %w", sysattr.NVIDIADriverVersion, fserr.Cause(err)))
	}
	v, err := efa.ReadDriverVersion(r)
	n.EFADriverVersion = v
	errs = append(errs, err)
	if proc == nil {
		return n, errors.Join(errs...)
	}
	switch b, err := fs.ReadFile(proc, nVIDIAParamsFile); {
	case err == nil:
		p, perr := parseParams(string(b))
		n.NVIDIAParams = p
		if perr != nil {
			errs = append(errs, fmt.Errorf("proc %s: %w", nVIDIAParamsFile, perr))
		}
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("proc %s: %w", nVIDIAParamsFile, fserr.Cause(err)))
	}
	switch b, err := fs.ReadFile(proc, kernelReleaseFile); {
	case err == nil:
		s := strings.TrimSpace(string(b))
		if _, _, ok := kernelVersion(s); ok {
			n.KernelRelease = s
		} else {
			errs = append(errs, fmt.Errorf("proc %s: %q is not a kernel release", kernelReleaseFile, names.Printable(s)))
		}
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("proc %s: %w", kernelReleaseFile, fserr.Cause(err)))
	}
	return n, errors.Join(errs...)
}

// maxParams bounds the parameters parseParams keeps: the nvidia module
// has about 60.
const maxParams = 1024

// parseParams parses the nvidia module's params file: one "Name: value"
// a line, the value as printed (a string parameter keeps its quotes). It
// returns the lines it understood and an error naming the first it did
// not.
func parseParams(s string) (map[string]string, error) {
	out := map[string]string{}
	var bad error
	for i, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") || names.CheckText(name) != nil {
			if bad == nil {
				bad = fmt.Errorf("line %d, %q: not \"Name: value\"", i+1, names.Printable(clip(line)))
			}
			continue
		}
		if len(out) == maxParams {
			return out, fmt.Errorf("more than %d parameters", maxParams)
		}
		out[name] = strings.TrimSpace(value)
	}
	return out, bad
}

// driverBranch returns the major number of an NVIDIA driver version, 580
// of "580.105.08".
func driverBranch(version string) (int, bool) {
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n <= 0 || len(major) > 4 {
		return 0, false
	}
	return n, true
}

// kernelVersion returns the major and minor numbers of a kernel release,
// 6 and 1 of "6.1.119-129.201.amzn2023.x86_64".
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minorStr := parts[1]
	if i := strings.IndexFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorStr = minorStr[:i]
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(minorStr)
	if err1 != nil || err2 != nil || major < 0 || minor < 0 || len(parts[0]) > 4 || len(minorStr) > 4 {
		return 0, 0, false
	}
	return major, minor, true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
