// Package e2e tests efakit as it is deployed: the Helm chart renders into
// objects the Kubernetes API accepts, with the security and mounts the
// plugin needs; the plugin and the real kube-apiserver, kube-scheduler and
// kube-controller-manager allocate the users' claims; and on a real node (a
// kubelet, containerd and runc started by the tests) pods get exactly their
// EFAs. It is a module of its own so that Helm, the Kubernetes binaries'
// pins and what they pull in never become dependencies of the library.
package e2e
