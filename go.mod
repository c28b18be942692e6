module github.com/efakit/efakit

go 1.25

require (
	github.com/jaypipes/pcidb v1.1.1
	github.com/stretchr/testify v1.12.1
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.31.0
)

require (
	github.com/vishvananda/netns v0.0.5 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
