package main

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// podNodeFilter is whether the pod may run on a node by its node selector
// and required node affinity.
func podNodeFilter(pod *corev1.Pod, n *corev1.Node) bool {
	for k, v := range pod.Spec.NodeSelector {
		if n.Labels[k] != v {
			return false
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n) {
			return true
		}
	}
	return false
}

// termMatches is a node selector term as the scheduler reads it: every
// expression holds; a term with none matches no node.
func termMatches(term corev1.NodeSelectorTerm, n *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, r := range term.MatchExpressions {
		v, ok := n.Labels[r.Key]
		if !requirementHolds(r, v, ok) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		if r.Key != "metadata.name" || !requirementHolds(r, n.Name, true) {
			return false
		}
	}
	return true
}

func requirementHolds(r corev1.NodeSelectorRequirement, v string, ok bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok || len(r.Values) != 1 {
			return false
		}
		got, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return got > want
		}
		return got < want
	}
	return false
}
