package resources

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/topology"
)

// Pool is a node's pool of devices: its slices in order. The plugin hands
// it to the kubelet plugin helper (as resourceslice.DriverResources);
// Slices turns it into ResourceSlice objects.
type Pool struct {
	Name string // the node's name
	// Generation is the pool's generation; 0 is printed as 1, as the
	// helper's controller starts.
	Generation int64
	Slices     []Slice
}

// Slice is one ResourceSlice's content: devices, or (mixed group mode)
// the counter sets they consume.
type Slice struct {
	Devices        []resourceapi.Device
	SharedCounters []resourceapi.CounterSet
}

// Build makes the devices of the node's pool. By cfg.Groups: single EFAs
// (the default), one group device per PCIe root instead (exclusive), or
// both, made exclusive by shared counters in a counters-only slice (mixed).
// An EFA that cannot be published is named in the error; the others are
// in the pool.
func Build(t *topology.Topology, cfg Config) (Pool, error) {
	if err := cfg.CheckSharing(); err != nil {
		return Pool{}, err
	}
	var singles []resourceapi.Device
	var members []*topology.Device
	var errs []string
	for _, d := range t.Of(topology.KindEFA) {
		if d.EFA.Verbs == nil {
			// Nothing to give a container: not published until the
			// uverbs device appears (ib_uverbs loaded).
			errs = append(errs, fmt.Sprintf("efa %s: no uverbs device: not published", d.Name))
			continue
		}
		dev, err := EFADevice(t, d, cfg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if cfg.Sharing == SharingCapacity {
			shareable(&dev, cfg.shares())
		}
		singles = append(singles, dev)
		members = append(members, d)
	}
	var devs []resourceapi.Device
	var counters []resourceapi.CounterSet
	switch cfg.Groups {
	case GroupsNone:
		devs = singles
	case GroupsExclusive, GroupsMixed:
		groups := Groups(t, members)
		if cfg.Groups == GroupsMixed {
			devs = singles
			for i := range devs {
				devs[i].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
					CounterSet: CounterSetName(groups.rootOf[devs[i].Name]),
					Counters:   map[string]resourceapi.Counter{devs[i].Name: oneCounter()},
				}}
			}
		}
		for _, g := range groups.List {
			dev, err := GroupDevice(t, g, cfg)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if cfg.Groups == GroupsMixed {
				set := resourceapi.CounterSet{Name: CounterSetName(g.Root), Counters: map[string]resourceapi.Counter{}}
				use := map[string]resourceapi.Counter{}
				for _, m := range g.Members {
					set.Counters[DeviceName(m.PCI.Address)] = oneCounter()
					use[DeviceName(m.PCI.Address)] = oneCounter()
				}
				counters = append(counters, set)
				dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: use}}
			}
			devs = append(devs, dev)
		}
	default:
		return Pool{}, fmt.Errorf("unknown group mode %q (none, exclusive, mixed)", cfg.Groups)
	}
	pool := Pool{Name: cfg.NodeName}
	for len(counters) > 0 {
		n := min(len(counters), resourceapi.ResourceSliceMaxCounterSets)
		pool.Slices = append(pool.Slices, Slice{SharedCounters: counters[:n]})
		counters = counters[n:]
	}
	per := MaxDevicesPerSlice
	if cfg.Groups == GroupsMixed {
		per = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	for len(devs) > 0 {
		n := min(len(devs), per)
		pool.Slices = append(pool.Slices, Slice{Devices: devs[:n]})
		devs = devs[n:]
	}
	if len(pool.Slices) == 0 {
		// An empty pool says the driver runs and the node has no EFA.
		pool.Slices = []Slice{{Devices: []resourceapi.Device{}}}
	}
	if len(errs) > 0 {
		return pool, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return pool, nil
}

func oneCounter() resourceapi.Counter { return resourceapi.Counter{Value: resource.MustParse("1")} }

// Slices turns a pool into the ResourceSlice objects the kubelet plugin's
// controller creates for a node: generation 1 (or the pool's), names
// generated from the slice index, driver and node.
func Slices(pool Pool, cfg Config) []*resourceapi.ResourceSlice {
	gen := pool.Generation
	if gen == 0 {
		gen = 1
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		node := cfg.NodeName
		out = append(out, &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{GenerateName: fmt.Sprintf("%x-%s-%s-", i, cfg.Driver(), node)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         cfg.Driver(),
				NodeName:       &node,
				Pool:           resourceapi.ResourcePool{Name: pool.Name, Generation: gen, ResourceSliceCount: int64(len(pool.Slices))},
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		})
	}
	return out
}
