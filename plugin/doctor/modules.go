package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/sysfs"
)

// fixModules is the fix for a missing kernel module.
const fixModules = "load the efa and ib_uverbs modules (the EFA installer, or an EKS accelerated AMI)"

// kernelModules checks module/efa and module/ib_uverbs. A module the kernel
// has built in, or a capture that holds no module/ directory, is judged by
// its work instead: the efa driver in bus/pci/drivers, uverbs devices in
// class/infiniband_verbs.
func (f *facts) kernelModules() Check {
	var found, missing, unlisted, notes []string

	efaLoaded, err := f.exists("module/efa")
	switch {
	case err != nil:
		notes = append(notes, err.Error())
	case efaLoaded:
		v, err := f.sysfs.ReadString("module/efa/version")
		switch {
		case err == nil && v != "":
			found = append(found, "efa "+v)
		case err == nil || errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sysfs.ErrDanglingLink):
			found = append(found, "efa")
		default:
			found = append(found, "efa")
			notes = append(notes, fmt.Sprintf("module/efa/version: %v", fserr.Cause(err)))
		}
	default:
		bound, err := f.exists("bus/pci/drivers/efa")
		switch {
		case err != nil:
			notes = append(notes, err.Error())
			missing = append(missing, "module/efa")
		case bound:
			found = append(found, "efa (bus/pci/drivers/efa exists)")
			unlisted = append(unlisted, "efa")
		default:
			missing = append(missing, "module/efa")
		}
	}

	uverbsLoaded, err := f.exists("module/ib_uverbs")
	switch {
	case err != nil:
		notes = append(notes, err.Error())
	case uverbsLoaded:
		found = append(found, "ib_uverbs")
	case len(f.verbs) > 0:
		found = append(found, fmt.Sprintf("ib_uverbs (%s holds %s)", verbsClass, plural(len(f.verbs), "device")))
		unlisted = append(unlisted, "ib_uverbs")
	default:
		missing = append(missing, "module/ib_uverbs")
	}

	var parts []string
	if len(found) > 0 {
		parts = append(parts, "loaded: "+strings.Join(found, ", "))
	}
	if len(unlisted) > 0 {
		parts = append(parts, strings.Join(unlisted, " and ")+" not under module/ (built in, or a capture without module/)")
	}
	if len(missing) > 0 {
		parts = append(parts, "missing from the sysfs root: "+strings.Join(missing, ", "))
	}
	parts = append(parts, notes...)
	msg := strings.Join(parts, "; ")
	switch {
	case len(missing) > 0:
		return Check{ID: CheckKernelModules, Status: Fail, Message: msg, Fix: fixModules}
	case len(notes) > 0:
		return Check{ID: CheckKernelModules, Status: Warn, Message: msg, Fix: "the sysfs root is damaged: check --sysfs"}
	}
	return Check{ID: CheckKernelModules, Status: Pass, Message: msg}
}

// exists reports whether a sysfs path resolves; an error other than "does
// not exist" names the path.
func (f *facts) exists(name string) (bool, error) {
	ok, err := f.sysfs.Exists(name)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, fserr.Cause(err))
	}
	return ok, nil
}
