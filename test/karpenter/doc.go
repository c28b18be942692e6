// Package karpenter checks efakit's hardware facts against Karpenter's
// released real-node data: the tables of
// github.com/aws/karpenter-provider-aws/pkg/providers/drametadata (pinned
// in go.mod), which hold, per EC2 instance type, the dra.net EFA devices and
// the NVIDIA GPU devices that the drivers published on a real node of that
// type. For every instance type that internal/fixturegen/machines builds
// (the bundled fixtures and the other sizes of their families) it scans the
// generated sysfs, builds the ResourceSlices the plugin would publish, and
// compares them with the tables; for every type of internal/fleet and of
// the tables it says which lists have it.
//
// It is a module of its own because the pinned release declares Go
// 1.26.11: run it with GOTOOLCHAIN=go1.27.3 (make karpenter). The
// generated report is docs/karpenter-agreement.md:
//
//	GOTOOLCHAIN=go1.27.3 go test ./...            # compare, fail on drift
//	GOTOOLCHAIN=go1.27.3 go test ./... -update    # rewrite the report
package karpenter
