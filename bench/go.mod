module github.com/efakit/efakit/bench

go 1.26.8

require (
	github.com/Mellanox/rdmamap v1.1.0
	github.com/efakit/efakit v0.0.0-00010101000000-000000000000
	github.com/jaypipes/ghw v0.27.0
	github.com/prometheus/procfs v0.23.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/go-ole/go-ole v1.2.6 // indirect
	github.com/jaypipes/pcidb v1.1.1 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	github.com/yusufpapurcu/wmi v1.2.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	howett.net/plist v1.0.2-0.20250314012144-ee69052608d9 // indirect
)

replace github.com/efakit/efakit => ../
