package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// devicePlugin checks for AWS's EFA device plugin on the node: its
// extended resource in the Node's capacity (the API), and its socket in the
// kubelet's device-plugins directory (the node). Two owners of one EFA
// would give it to two pods, so efakit's plugin stands aside where the
// resource shows.
func (f *facts) devicePlugin() Check {
	var parts []part
	if f.node == nil {
		parts = append(parts, part{Skip, f.apiSkip, ""})
	} else if q, ok := f.node.Status.Capacity[resources.DevicePluginResource]; ok && !q.IsZero() {
		parts = append(parts, part{Fail, fmt.Sprintf("node %s has capacity %s: %s (AWS's EFA device plugin owns its EFAs)", f.node.Name, resources.DevicePluginResource, q.String()),
			"remove AWS's EFA device plugin from this node: efakit's plugin publishes nothing while the node shows the resource"})
	} else {
		parts = append(parts, part{Pass, fmt.Sprintf("node %s has no %s capacity", f.node.Name, resources.DevicePluginResource), ""})
	}

	dir, ents, unread := f.kubeletDir("device-plugins")
	if unread != nil {
		parts = append(parts, *unread)
	} else {
		var sockets []string
		for _, e := range ents {
			if e.Type()&fs.ModeSocket != 0 && strings.Contains(strings.ToLower(e.Name()), "efa") {
				sockets = append(sockets, e.Name())
			}
		}
		if len(sockets) > 0 {
			parts = append(parts, part{Warn, fmt.Sprintf("an EFA device plugin's socket in %s: %s", dir, strings.Join(sockets, ", ")),
				"remove AWS's EFA device plugin (its DaemonSet) from this node"})
		} else {
			parts = append(parts, part{Pass, fmt.Sprintf("no EFA device plugin socket in %s", dir), ""})
		}
	}
	return combine(CheckDevicePlugin, parts...)
}

// draDriver checks for a second publisher of the driver name: EKS Auto
// Mode ships AWS's own dra.net, and any ResourceSlice of the driver on the
// node that efakit did not write is someone else's (the API); more than
// one registration of the driver with the kubelet (the node).
func (f *facts) draDriver() Check {
	drv := f.o.DriverName
	var parts []part
	if f.node == nil {
		parts = append(parts, part{Skip, f.apiSkip, ""})
	} else {
		if f.node.Labels[resources.AutoModeLabel] == resources.AutoModeValue {
			parts = append(parts, part{Fail, fmt.Sprintf("node %s is an EKS Auto Mode node (%s=%s), which runs AWS's own %s", f.node.Name, resources.AutoModeLabel, resources.AutoModeValue, drv),
				"run efakit on nodes outside EKS Auto Mode (its chart keeps off them)"})
		}
		list, err := f.o.Client.ResourceSlices(f.ctx, drv, f.node.Name)
		if err != nil {
			parts = append(parts, part{Skip, fmt.Sprintf("listing the ResourceSlices of %s on %s: %v", drv, f.node.Name, err), ""})
		} else if foreign := resources.ForeignSlices(list, drv, f.node.Name); len(foreign) > 0 {
			parts = append(parts, part{Fail, fmt.Sprintf("another publisher of %s on node %s: %s", drv, f.node.Name, listNames(foreign, 4)),
				fmt.Sprintf("remove the other %s driver from this node: two publishers of one driver name on a node hand out each other's devices", drv)})
		} else {
			parts = append(parts, part{Pass, fmt.Sprintf("%s of %s on node %s, all efakit's", plural(len(list), "ResourceSlice"), drv, f.node.Name), ""})
		}
	}

	dir, ents, unread := f.kubeletDir("plugins_registry")
	if unread != nil {
		parts = append(parts, *unread)
	} else {
		var regs []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), drv+"-") {
				regs = append(regs, e.Name())
			}
		}
		switch len(regs) {
		case 0:
			parts = append(parts, part{Warn, fmt.Sprintf("no %s registration in %s: efakit's plugin is not registered with this node's kubelet", drv, dir),
				"install efakit's chart, and check its pod on this node"})
		case 1:
			parts = append(parts, part{Pass, fmt.Sprintf("one %s registration in %s: %s", drv, dir, regs[0]), ""})
		default:
			parts = append(parts, part{Warn, fmt.Sprintf("%d %s registrations in %s: %s (a rolling update in progress, or a second %s driver)", len(regs), drv, dir, strings.Join(regs, ", "), drv),
				fmt.Sprintf("if it stays so, another %s driver runs on this node: remove it", drv)})
		}
	}
	return combine(CheckDRADriver, parts...)
}

// kubeletDir lists a directory of the kubelet's; when it cannot, the part
// says why (skip where it is not there, warn where it cannot be read).
func (f *facts) kubeletDir(name string) (string, []fs.DirEntry, *part) {
	dir := filepath.Join(f.o.KubeletDir, name)
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return dir, nil, &part{Skip, fmt.Sprintf("no %s here", dir), ""}
	case err != nil:
		return dir, nil, &part{Warn, err.Error(), "check --kubelet-dir, and run as root"}
	}
	return dir, ents, nil
}
