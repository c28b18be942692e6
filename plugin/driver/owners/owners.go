// Package owners tells whether another owner holds the node's EFAs (AWS's
// EFA device plugin, another dra.net driver, EKS Auto Mode) or the kernel
// keeps pods from seeing them: the plugin then stands aside, publishing
// and preparing nothing, and says why.
package owners

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/plugin/internal/live"
	"github.com/efakit/efakit/rdmans"
)

// Check says why the plugin must stand aside (an empty Verdict when it
// may publish), or an error when it cannot tell.
type Check func(ctx context.Context) (Verdict, error)

// Netns says to stand aside in the kernel's exclusive RDMA namespace
// mode: an RDMA device lives in one network namespace (the host's), so a
// pod never sees the EFA it was given, and CDI cannot move it. A kernel
// that cannot say (no RDMA netlink) is not a reason: the shared mode is
// the kernel's default.
func Netns(live live.Live) Check {
	var mu sync.Mutex
	var unknown string // the last error, logged once, not at every scan
	return func(ctx context.Context) (Verdict, error) {
		mode, err := live.RDMANetnsMode()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if err.Error() != unknown {
				klog.FromContext(ctx).Info("RDMA namespace mode unknown; taking the kernel's default", "default", "shared", "err", err)
			}
			unknown = err.Error()
			return Verdict{}, nil
		}
		if unknown != "" {
			klog.FromContext(ctx).Info("RDMA namespace mode known again", "mode", mode)
			unknown = ""
		}
		if mode == rdmans.Exclusive {
			return Verdict{Key: "netns", Reason: "the kernel's RDMA namespace mode is exclusive: pods would not see their EFAs; set it to shared (rdma system set netns shared)"}, nil
		}
		return Verdict{}, nil
	}
}

// Node says to stand aside where the Node shows another owner of its
// EFAs: the EFA device plugin's resource in its capacity (unless allowed),
// or EKS Auto Mode, whose nodes run AWS's own DRA driver as dra.net. It
// reads the Node from the watch (NodeWatch.Get), not from the API server.
func Node(nodes *NodeWatch, allowDevicePlugin bool) Check {
	return func(ctx context.Context) (Verdict, error) {
		n, err := nodes.Get(ctx)
		if err != nil {
			return Verdict{}, err
		}
		if v := n.Labels[resources.AutoModeLabel]; v == resources.AutoModeValue {
			return Verdict{Key: "dra-driver", Reason: fmt.Sprintf("node %s is an EKS Auto Mode node (%s=%s), whose own DRA driver publishes its EFAs as dra.net: two publishers of one pool would fight; keep efakit off Auto Mode nodes (the chart's default affinity does)", n.Name, resources.AutoModeLabel, v)}, nil
		}
		if q, ok := n.Status.Capacity[resources.DevicePluginResource]; ok && !q.IsZero() && !allowDevicePlugin {
			return Verdict{Key: "device-plugin", Reason: fmt.Sprintf("node %s has %s %s from AWS's EFA device plugin, which owns these EFAs: remove the device plugin from this node (or run with --allow-with-device-plugin)", n.Name, q.String(), resources.DevicePluginResource)}, nil
		}
		return Verdict{}, nil
	}
}

// SliceSource gives the ResourceSlices of the driver name on the node as
// a watch holds them (publishing.Slices.Current), or an error while the
// watch has not listed them yet.
type SliceSource func(ctx context.Context) ([]resourceapi.ResourceSlice, error)

// Publishers says to stand aside where ResourceSlices of the driver
// name on the node hold devices efakit does not write: another dra.net
// driver publishes there. It reads them from the plugin's watch of the
// node's slices, not from the API server.
func Publishers(slices SliceSource, driverName, node string) Check {
	return func(ctx context.Context) (Verdict, error) {
		l, err := slices(ctx)
		if err != nil {
			return Verdict{}, fmt.Errorf("listing the %s ResourceSlices of node %s: %w", driverName, node, err)
		}
		if foreign := resources.ForeignSlices(l, driverName, node); len(foreign) > 0 {
			return Verdict{Key: "dra-driver", Reason: fmt.Sprintf("another %s driver publishes on node %s (%s): two publishers of one driver name fight over the node's slices; remove one of them", driverName, node, strings.Join(foreign, "; "))}, nil
		}
		return Verdict{}, nil
	}
}

// All runs the checks in order: the first reason to stand aside
// wins; with none, an error of any check means the plugin cannot tell.
func All(checks ...Check) Check {
	return func(ctx context.Context) (Verdict, error) {
		var errs []error
		for _, check := range checks {
			v, err := check(ctx)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if v.Reason != "" {
				return v, nil
			}
		}
		return Verdict{}, errors.Join(errs...)
	}
}

// Verdict is a Check's answer: why the plugin must stand aside ("" when
// it may publish), and a short key for the metric.
type Verdict struct {
	Key    string // netns, device-plugin, dra-driver; api when the API cannot tell
	Reason string
}
