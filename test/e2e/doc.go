// Package e2e tests efakit as it is deployed: the Helm chart renders into
// objects the Kubernetes API accepts, with the security and mounts the
// plugin needs. It is a module of its own so that Helm and what it pulls in
// never become dependencies of the library.
package e2e
