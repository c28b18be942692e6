// Package k8s134 pins the oldest Kubernetes efakit supports, 1.34, for the
// end-to-end tests' version matrix (compat_test.go): its kube-apiserver is
// a tool of this module, built from the Go module proxy at the version of
// go.mod. k8s.io/kubernetes's go.mod names its staging modules (k8s.io/api,
// k8s.io/apiserver, ...) as v0.0.0 with a replace to its own staging
// directory, which a dependent module does not see: the replace directives
// here name the published v0.34.x of each instead.
package k8s134
