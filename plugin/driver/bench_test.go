package driver_test

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"

	"github.com/efakit/efakit/plugin/driver"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// BenchmarkPrepare4 prepares and unprepares one 4-EFA claim on the p5: the
// CDI spec written, validated and renamed into place, and the checkpoint
// saved (fsyncs included), then both undone.
func BenchmarkPrepare4(b *testing.B) {
	root, err := sysfs.OpenCapture("../../testdata/sysfs/p5.48xlarge.sysfs")
	if err != nil {
		b.Fatal(err)
	}
	w, err := cdi.NewWriter(b.TempDir(), "dra.net")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	p, err := driver.NewPlugin(ctx, driver.PluginOptions{Config: resources.Config{NodeName: node}, SysfsRoot: root, CDI: w,
		Store: checkpoint.NewStore(b.TempDir()), BootID: bootA})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Rescan(ctx); err != nil {
		b.Fatal(err)
	}
	c := claim("four", "11111111-1111-1111-1111-111111111111", "efa-0000-4f-00-0", "efa-0000-50-00-0", "efa-0000-51-00-0", "efa-0000-52-00-0")
	ref := []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil || res[c.UID].Err != nil {
			b.Fatal(err, res[c.UID].Err)
		}
		if _, err := p.UnprepareResourceClaims(ctx, ref); err != nil {
			b.Fatal(err)
		}
	}
}
