// Package k8s pins the Kubernetes control plane the end-to-end tests run:
// kube-apiserver, kube-scheduler and kube-controller-manager are tools of
// this module, built from the Go module proxy at the version of go.mod.
package k8s
