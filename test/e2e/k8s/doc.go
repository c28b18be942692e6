// Package k8s pins the Kubernetes the end-to-end tests run: kube-apiserver,
// kube-scheduler, kube-controller-manager and the real node's kubelet are
// tools of this module, built from the Go module proxy at the version of
// go.mod. k8s.io/cri-streaming is required at that version by hand: the
// kubelet needs it, and k8s.io/kubernetes's go.mod names it only as v0.0.0
// with a replace to its staging directory, which a dependent module does
// not see.
package k8s
