package driver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/owners"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// nodeGroupMode is the group mode the node's label sets (cfg.GroupsNodeLabel),
// read once at start, before the first scan: cfg.Groups where the node has
// no such label. A node that cannot be read, or whose label names no mode,
// stops the plugin with the reason: publishing in a mode the operator did
// not choose would strand the claims written for the other.
func nodeGroupMode(ctx context.Context, client kubernetes.Interface, cfg resources.Config) (resources.GroupMode, error) {
	var node *corev1.Node
	err := retryRead(ctx, func(ctx context.Context) error {
		var err error
		node, err = client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("reading node %s for its group mode (label %s): %w", cfg.NodeName, cfg.GroupsNodeLabel, err)
	}
	mode, err := resources.NodeGroupMode(node.Labels, cfg.GroupsNodeLabel, cfg.Groups)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	v, labelled := node.Labels[cfg.GroupsNodeLabel]
	klog.FromContext(ctx).Info("Group mode", "groups", groupsName(mode), "label", cfg.GroupsNodeLabel, "labelled", labelled, "value", v)
	return mode, nil
}

// stopOnGroupLabel stops the plugin when the node's label changes its
// group mode (flag: the mode without the label): the kubelet starts it
// again, and it publishes in the new mode from its first scan. Prepared
// claims stay prepared through the restart (the checkpoint).
func stopOnGroupLabel(nodes *owners.NodeWatch, cfg resources.Config, flag resources.GroupMode, stop func(error)) {
	nodes.OnUpdate(func(_, cur *corev1.Node) {
		mode, err := resources.NodeGroupMode(cur.Labels, cfg.GroupsNodeLabel, flag)
		switch {
		case err != nil:
			stop(fmt.Errorf("node %s: %w; stopping", cfg.NodeName, err))
		case mode != cfg.Groups:
			stop(fmt.Errorf("node %s: label %s now sets group mode %s (was %s): stopping, to start again in it",
				cfg.NodeName, cfg.GroupsNodeLabel, groupsName(mode), groupsName(cfg.Groups)))
		}
	})
}

// groupsName names a group mode as the flag and the label do.
func groupsName(m resources.GroupMode) string {
	if m == resources.GroupsNone {
		return "none"
	}
	return string(m)
}
