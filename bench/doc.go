// Package bench compares efakit's discovery with ghw's PCI discovery and
// procfs's InfiniBand class reader on the same sysfs trees (the synthetic
// fixtures in ../testdata/sysfs). It is a separate module so that ghw and
// procfs never become dependencies of efakit itself.
//
//	go test -run='^$' -bench=Compare -benchtime=15x ./...
package bench
