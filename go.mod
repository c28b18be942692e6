module github.com/efakit/efakit

go 1.26.8

require (
	github.com/jaypipes/pcidb v1.1.1
	github.com/stretchr/testify v1.12.1
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.50.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/Mellanox/rdmamap v1.1.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/mod v0.43.0 // indirect
)
