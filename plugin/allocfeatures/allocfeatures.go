// Package allocfeatures is the allocator kube-scheduler runs: the features
// it asks of k8s.io/dynamic-resource-allocation's structured allocator with
// its default feature gates. structured.NewAllocator picks the first of its
// implementations (stable, incubating, experimental) that supports every
// feature asked, so a test or benchmark that builds an allocator with
// other features measures another implementation than the scheduler's.
//
// Scheduler137 and CEL137 are checked against kube-scheduler's own code
// by test/e2e's TestAllocatorFeaturesMatchScheduler, which runs
// test/e2e/k8s/cmd/allocfeatures: dynamicresources.AllocatorFeatures of
// the default gates of k8s.io/kubernetes at the version test/e2e/k8s pins,
// built as the e2e's kube-scheduler is.
package allocfeatures

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Scheduler137 is what kube-scheduler 1.37 asks with its default gates:
// DRAAdminAccess, DRAPrioritizedList, DRADeviceTaints and
// DRAResourceClaimDeviceStatus are GA; DRAPartitionableDevices,
// DRADeviceBindingConditions and DRAConsumableCapacity beta and on;
// DRAFractionalCapacityRange beta but off (its default turns true only
// where the minimum compatibility version is 1.37, and a 1.37 binary's is
// 1.36); DRAListTypeAttributes, DRAOptionalNodeOperations,
// DRADerivedAttributes and DRADeviceCompatibilityGroups alpha and off.
func Scheduler137() structured.Features {
	return structured.Features{
		AdminAccess:            true,
		PrioritizedList:        true,
		PartitionableDevices:   true,
		DeviceTaints:           true,
		DeviceBindingAndStatus: true,
		ConsumableCapacity:     true,
	}
}

// CEL137 is the CEL environment kube-scheduler 1.37 compiles selectors in
// with its default gates (DRAConsumableCapacity on, DRAListTypeAttributes
// off).
func CEL137() cel.Features {
	return cel.Features{EnableConsumableCapacity: true}
}

// Cache is a selector cache as the scheduler makes one (ten expressions).
func Cache() *cel.Cache { return cel.NewCache(10, CEL137()) }
