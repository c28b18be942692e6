package resources_test

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/efakit/efakit/plugin/allocfeatures"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// BenchmarkSchedulingCost is what the scheduler pays for one claim in a
// cluster of p5 nodes: one allocator over every slice, then Allocate on each
// candidate node, as kube-scheduler's filter does. The claim is the node's
// own "GPU with its EFAs" template in each group mode.
func BenchmarkSchedulingCost(b *testing.B) {
	root, err := sysfs.OpenCapture(p5)
	if err != nil {
		b.Fatal(err)
	}
	topo, err := topology.Scan(root)
	if err != nil {
		b.Fatal(err)
	}
	for _, nodes := range []int{100, 1000} {
		for _, mode := range groupModes {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, modeName(mode)), func(b *testing.B) {
				var slices []*resourceapi.ResourceSlice
				var nodeObjs []*v1.Node
				for i := range nodes {
					name := fmt.Sprintf("node-%d", i)
					cfg := resources.Config{NodeName: name, Groups: mode}
					res, err := resources.Build(topo, cfg)
					if err != nil {
						b.Fatal(err)
					}
					for j, s := range resources.Slices(res, cfg) {
						s.Name = fmt.Sprintf("%s%d", s.GenerateName, j)
						slices = append(slices, s)
					}
					for _, s := range otherDriverSlices(topo) {
						s.Name += "-" + name
						s.Spec.NodeName, s.Spec.Pool.Name = &name, name
						slices = append(slices, s)
					}
					nodeObjs = append(nodeObjs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
				}
				cls := classes{}
				for _, c := range append(resources.DeviceClasses(resources.ClassOptions{}), otherClasses...) {
					cls[c.Name] = c
				}
				tms, _ := resources.ClaimTemplates(topo, mode, "")
				var claim *resourceapi.ResourceClaim
				for _, tm := range tms {
					if tm.Template.Name == "gpu-with-efas" || tm.Template.Name == "gpus-with-efa-group" && mode == resources.GroupsExclusive {
						claim = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "uid-c"}, Spec: *tm.Template.Spec.Spec.DeepCopy()}
					}
				}
				if claim == nil {
					b.Fatal("no template")
				}
				features := allocfeatures.Scheduler137()
				cache := allocfeatures.Cache()
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					alloc, err := structured.NewAllocator(ctx, features, structured.AllocatedState{
						AllocatedDevices:         sets.New[structured.DeviceID](),
						AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
						AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
					}, cls, slices, cache)
					if err != nil {
						b.Fatal(err)
					}
					for _, n := range nodeObjs {
						res, err := alloc.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim})
						if err != nil || len(res) != 1 {
							b.Fatalf("node %s: %v, %d results", n.Name, err, len(res))
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes)/1e6, "ms/node")
			})
		}
	}
}
