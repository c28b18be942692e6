package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/efakit/efakit/rdmans"
	"github.com/efakit/efakit/sysfs"
)

// efaDevices checks that efakit's discovery finds EFAs, each with its uverbs
// device.
func (f *facts) efaDevices() Check {
	var noVerbs, withVerbs, gens []string
	for _, d := range f.efas {
		if d.Verbs == nil {
			noVerbs = append(noVerbs, d.Name)
			continue
		}
		withVerbs = append(withVerbs, fmt.Sprintf("%s (%s)", d.Name, d.Verbs.Name))
		if g := d.Generation.String(); !slices.Contains(gens, g) {
			gens = append(gens, g)
		}
	}
	var inactive []string
	for _, p := range f.inactive {
		inactive = append(inactive, p.Address.String())
	}
	// The missing uverbs devices are this check's finding; their scan
	// errors would only say it again.
	var damage []string
	for _, err := range f.scanErrs {
		var e *sysfs.Error
		if errors.As(err, &e) && e.Subsystem == "efa" && slices.Contains(noVerbs, e.Device) {
			continue
		}
		damage = append(damage, err.Error())
	}

	var parts []part
	switch {
	case len(f.efas) == 0 && len(inactive) == 0:
		parts = append(parts, part{Fail, "no EFA in sysfs (no PCI function with an Amazon EFA ID or bound to the efa driver)",
			"run on an instance type with EFA and attach EFA interfaces at launch (efakit list shows what sysfs holds)"})
	case len(f.efas) == 0:
		parts = append(parts, part{Fail, fmt.Sprintf("%s without an RDMA device: %s", plural(len(inactive), "EFA PCI function"), listNames(inactive, maxListed)), fixModules})
	default:
		if len(withVerbs) > 0 {
			parts = append(parts, part{Pass, fmt.Sprintf("%s (%s) with a uverbs device: %s", plural(len(withVerbs), "EFA"), strings.Join(gens, ", "), listNames(withVerbs, maxListed)), ""})
		}
		if len(noVerbs) > 0 {
			parts = append(parts, part{Fail, fmt.Sprintf("%s without a uverbs device (ib_uverbs missing): %s", plural(len(noVerbs), "EFA"), listNames(noVerbs, maxListed)),
				"load the ib_uverbs module (the EFA installer, or an EKS accelerated AMI)"})
		}
		if len(inactive) > 0 {
			parts = append(parts, part{Warn, fmt.Sprintf("%s without an RDMA device (efa driver not bound): %s", plural(len(inactive), "EFA PCI function"), listNames(inactive, maxListed)),
				"bind the efa driver to them, or detach the unused EFA interfaces"})
		}
	}
	if len(damage) > 0 {
		parts = append(parts, part{Warn, fmt.Sprintf("%s reading sysfs: %s", plural(len(damage), "error"), listNames(damage, 2)),
			"sysfs is damaged or incomplete here: efakit list prints every error"})
	}
	return combine(CheckEFADevices, parts...)
}

// uverbsNodes checks, for every uverbs device of sysfs (EFAs and others
// such as mlx5), whether its node under DevDir is the character device
// sysfs names and opens read-write.
func (f *facts) uverbsNodes() Check {
	if len(f.verbs) == 0 {
		c := Check{ID: CheckUverbsNodes, Status: Skip, Message: fmt.Sprintf("no uverbs device in sysfs (%s is empty or absent)", verbsClass)}
		if len(f.verbsErrs) > 0 {
			c.Status, c.Message = Warn, fmt.Sprintf("no uverbs device read from sysfs: %s", listNames(errorStrings(f.verbsErrs), 2))
			c.Fix = "sysfs is damaged or incomplete here: check --sysfs"
		}
		return c
	}
	var notChar, wrong, failed []string
	var absent []*verbsDevice
	for _, v := range f.verbs {
		switch v.Node.State {
		case nodeAbsent:
			absent = append(absent, v)
		case nodeNotCharDevice:
			notChar = append(notChar, fmt.Sprintf("%s (%s) is %s", v.Path, v.RDMA, v.Node.Kind))
		case nodeWrongNumber:
			wrong = append(wrong, fmt.Sprintf("%s (%s) is %d:%d, sysfs says %d:%d", v.Path, v.RDMA, v.Node.Major, v.Node.Minor, v.Major, v.Minor))
		case nodeStatFailed, nodeOpenFailed:
			failed = append(failed, fmt.Sprintf("%s (%s): %v", v.Path, v.RDMA, v.Node.Err))
		}
	}
	ok := f.openable(false)
	summary := fmt.Sprintf("%d of %s openable", len(ok), plural(len(f.verbs), "RDMA device"))
	if len(ok) > 0 {
		summary += fmt.Sprintf(": %s (%s)", uverbsRanges(ok), listNames(rdmaNames(ok), 4))
	}
	parts := []part{{Pass, summary, ""}}

	if len(absent) > 0 {
		msg := fmt.Sprintf("%d not in %s: %s", len(absent), filepath.Join(f.o.DevDir, "infiniband"), uverbsRanges(absent))
		if f.o.Place == OnNode {
			parts = append(parts, part{Fail, msg, fmt.Sprintf("%s is not the node's /dev (the kernel's devtmpfs makes every uverbs node): pass --dev", f.o.DevDir)})
		} else {
			parts = append(parts, part{Pass, msg + " (not given to this container)", ""})
		}
	}
	if len(notChar) > 0 {
		parts = append(parts, part{Fail, "not a character device: " + listNames(notChar, 4), "remove what stands at those paths: a uverbs node is a character device"})
	}
	if len(wrong) > 0 {
		fix := "the node was made for another device (the uverbs devices were numbered again: a reboot, or an efa or ib_uverbs module reload): recreate the pod so that its claim is prepared again"
		if f.o.Place == OnNode {
			fix = fmt.Sprintf("%s holds stale nodes: mount devtmpfs there (or pass --dev)", f.o.DevDir)
		}
		parts = append(parts, part{Fail, "wrong device number: " + listNames(wrong, 4), fix})
	}
	if len(failed) > 0 {
		fix := "run as root"
		if f.o.Place == InPod {
			fix = "the runtime must give the container its uverbs nodes through CDI (containerd: enable_cdi = true)"
			if f.exclusiveRefused() {
				fix = exclusiveFix
			}
		}
		parts = append(parts, part{Fail, "cannot open: " + listNames(failed, 4), fix})
	}
	if len(ok) == 0 && f.o.Place == InPod && len(notChar)+len(wrong)+len(failed) == 0 {
		parts = append(parts, part{Fail, "this container can open no uverbs node",
			"give the container EFAs through a ResourceClaim of efakit's DeviceClass, and check that the runtime applies CDI specs"})
	}
	if len(f.verbsErrs) > 0 {
		parts = append(parts, part{Warn, fmt.Sprintf("%s reading sysfs: %s", plural(len(f.verbsErrs), "error"), listNames(errorStrings(f.verbsErrs), 2)),
			"sysfs is damaged or incomplete here: check --sysfs"})
	}
	return combine(CheckUverbsNodes, parts...)
}

// exclusiveFix is why a pod's uverbs node does not open in the kernel's
// exclusive RDMA namespace mode: the kernel refuses (EPERM) to open a
// device of another network namespace (ib_uverbs_open checks
// rdma_dev_access_netns), and moves a device into the pod's only where
// its driver implements disassociate_ucontext, which the EFA drivers do
// not (drivers/infiniband/core/device.c, ib_device_set_netns_put).
const exclusiveFix = "the kernel's RDMA namespace mode is exclusive: it refuses a pod in its own network namespace every RDMA device of the host's, and no EFA driver can move one into the pod's; set the node's mode to shared (rdma system set netns shared)"

// exclusiveRefused tells whether a uverbs node was refused (EPERM) in
// the kernel's exclusive RDMA namespace mode.
func (f *facts) exclusiveRefused() bool {
	refused := slices.ContainsFunc(f.verbs, func(v *verbsDevice) bool {
		return v.Node.State == nodeOpenFailed && errors.Is(v.Node.Err, fs.ErrPermission)
	})
	if !refused {
		return false
	}
	mode, err := f.o.Live.RDMANetnsMode()
	return err == nil && mode == rdmans.Exclusive
}

func errorStrings(errs []error) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}
