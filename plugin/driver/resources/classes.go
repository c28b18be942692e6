package resources

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/internal/pciids"
)

// ClassOptions say how the DeviceClasses the project ships are named.
type ClassOptions struct {
	DriverName string // DefaultDriverName when empty
	ClassName  string // the single-EFA class; DefaultDeviceClass when empty
	// ExtendedResourceName, when set, is the single-EFA class's
	// extendedResourceName: a pod that asks for this extended resource
	// (vpc.amazonaws.com/efa, AWS's device plugin's) in its containers'
	// resources gets that many EFAs through a claim the scheduler makes
	// (DRAExtendedResource: beta and on by default in Kubernetes 1.36, GA
	// in 1.37; API servers without it drop the field).
	ExtendedResourceName string
}

// DeviceClasses are the classes the project ships: efa.networking.k8s.aws
// (or o.ClassName) selects exactly the single EFAs of the driver, with the
// very expression AWS's class uses; efa-group.networking.k8s.aws selects
// the group devices. Every device efakit publishes has both attributes
// the two classes read, so neither class fails on the other's devices.
func DeviceClasses(o ClassOptions) []*resourceapi.DeviceClass {
	driverName, className := o.DriverName, o.ClassName
	if driverName == "" {
		driverName = DefaultDriverName
	}
	if className == "" {
		className = DefaultDeviceClass
	}
	class := func(name, expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
		}
	}
	single := class(className, fmt.Sprintf(`device.driver == %q && device.attributes[%q].pciDevice == %q`, driverName, driverName, pciids.EFA))
	if o.ExtendedResourceName != "" {
		name := o.ExtendedResourceName
		single.Spec.ExtendedResourceName = &name
	}
	return []*resourceapi.DeviceClass{
		single,
		class(DefaultGroupDeviceClass, fmt.Sprintf(`device.driver == %q && device.attributes[%q].kind == %q`, driverName, driverName, KindGroup)),
	}
}
