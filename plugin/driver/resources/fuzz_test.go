package resources_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/internal/fixturegen/seeds"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// FuzzPublishedResources runs whole captures through what `efakit slices`
// and the plugin publish: ParseCapture, NewMemFS, topology.Scan,
// PublishedResources (Resources with health taints) in one group mode
// (mode % 3: none, exclusive, mixed; one a run keeps runs fast), then
// Slices. Whatever the capture holds, every EFA with a uverbs device
// is published or named in the error, every published device passes the
// API's limits, names are unique in the pool, slices stay within their
// limits, and counters consumed are counters offered.
func FuzzPublishedResources(f *testing.F) {
	caps, err := seeds.Captures()
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		for mode := range len(groupModes) {
			f.Add(caps[name], uint8(mode), mode == 1)
		}
	}
	f.Fuzz(func(t *testing.T, capture string, mode uint8, numaList bool) {
		es, err := sysfs.ParseCapture(strings.NewReader(capture))
		if err != nil {
			return
		}
		m, err := sysfs.NewMemFS(es)
		if err != nil {
			return
		}
		topo, _ := topology.Scan(m)
		cfg := resources.Config{NodeName: "node-1", NUMAList: numaList, Groups: groupModes[int(mode)%len(groupModes)]}
		res, err := resources.Published(topo, cfg)
		if msg := checkResources(topo, res.Slices, err, cfg); msg != "" {
			t.Fatalf("groups %q: %s", cfg.Groups, msg)
		}
		objs := resources.Slices(res, cfg)
		for _, o := range objs {
			if o.Spec.Pool.ResourceSliceCount != int64(len(objs)) || *o.Spec.NodeName != cfg.NodeName || o.Spec.Driver != resources.DefaultDriverName {
				t.Fatalf("groups %q: slice of pool %s: count %d of %d, node %s, driver %s", cfg.Groups, o.Spec.Pool.Name, o.Spec.Pool.ResourceSliceCount, len(objs), *o.Spec.NodeName, o.Spec.Driver)
			}
		}
	})
}

var groupModes = []resources.GroupMode{resources.GroupsNone, resources.GroupsExclusive, resources.GroupsMixed}

// checkResources returns what is wrong with a pool's slices, "" for
// nothing.
func checkResources(topo *topology.Topology, pool []resources.Slice, err error, cfg resources.Config) string {
	if len(pool) == 0 {
		return "no slice: an empty pool has one empty slice"
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	devs := map[string]resourceapi.Device{}
	offered := map[string]map[string]bool{} // counter set -> counters
	per := resources.MaxDevicesPerSlice
	if cfg.Groups == resources.GroupsMixed {
		per = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	for _, s := range pool {
		if len(s.Devices) > per || len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			return fmt.Sprintf("a slice of %d devices and %d counter sets", len(s.Devices), len(s.SharedCounters))
		}
		for _, d := range s.Devices {
			if _, ok := devs[d.Name]; ok {
				return "device " + d.Name + " twice"
			}
			if err := resources.CheckDevice(d); err != nil {
				return "published: " + err.Error()
			}
			devs[d.Name] = d
		}
		for _, c := range s.SharedCounters {
			if offered[c.Name] != nil {
				return "counter set " + c.Name + " twice"
			}
			offered[c.Name] = map[string]bool{}
			for n := range c.Counters {
				offered[c.Name][n] = true
			}
		}
	}
	for _, d := range devs {
		for _, c := range d.ConsumesCounters {
			for n := range c.Counters {
				if !offered[c.CounterSet][n] {
					return "device " + d.Name + " consumes " + c.CounterSet + "/" + n + ", which no slice offers"
				}
			}
		}
	}
	for _, e := range topo.Of(topology.KindEFA) {
		if e.EFA.Verbs == nil {
			continue
		}
		name := resources.DeviceName(e.PCI.Address)
		if cfg.Groups == resources.GroupsExclusive {
			name = resources.GroupDeviceName(e.PCI.Root)
		}
		if _, ok := devs[name]; !ok && !strings.Contains(msg, e.Name) && !strings.Contains(msg, name) {
			return "EFA " + e.Name + " (" + name + ") neither published nor named in the error"
		}
	}
	return ""
}
