package claims

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/internal/atomicfile"
	"github.com/efakit/efakit/plugin/cdi"
)

// Unprepare forgets each claim and removes its CDI spec. A
// claim that is not prepared is not an error: the kubelet may ask twice.
// The checkpoint is saved once for the call, before any spec is removed: a
// crash in between leaves specs of no claim, which the next start removes,
// never a claim the kubelet unprepared whose spec comes back.
func (s *State) Unprepare(ctx context.Context, claims []kubeletplugin.NamespacedObject) map[types.UID]error {
	out := make(map[types.UID]error, len(claims))
	waited := s.deps.Metrics.Waited("unprepare", ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadState(ctx)
	logger := klog.FromContext(ctx)
	b := s.begin()
	took := make([]time.Duration, len(claims))
	devices := make([][]string, len(claims))
	for i, c := range claims {
		start := time.Now()
		devices[i] = claimDevices(s.cur.Claims[string(c.UID)])
		out[c.UID] = s.forget(b, string(c.UID))
		took[i] = time.Since(start)
	}
	start := time.Now()
	saveErr := s.commit(b)
	saved := time.Since(start)
	for i, c := range claims {
		start := time.Now()
		err := out[c.UID]
		switch {
		case err != nil:
		case saveErr != nil && b.changed[string(c.UID)]:
			err = saveErr
		default:
			err = s.files.CDI.Remove(string(c.UID))
			s.deps.Status.Forget(c.UID)
		}
		d := took[i] + saved + time.Since(start)
		s.deps.Metrics.Observe("unprepare", d, err)
		if err != nil {
			err = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
			logger.Error(err, "Unprepare failed", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID, "devices", devices[i], "duration", d, "waited", waited)
		} else {
			// devices is empty for a claim that was not prepared here.
			logger.Info("Unprepared claim", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID, "devices", devices[i], "duration", d, "waited", waited)
		}
		out[c.UID] = err
	}
	return out
}

// forget takes a claim out of the call's state; its spec is removed once
// the state is saved.
func (s *State) forget(b *batch, uid string) error {
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return err
	}
	if _, ok := s.cur.Claims[uid]; ok {
		delete(s.cur.Claims, uid)
		b.changed[uid] = true
	}
	return nil
}

// MetadataFileOps are the file operations the kubelet plugin helper writes
// each claim's device metadata with (a file in the data directory and a
// CDI spec, per request): its own, but without its two fsyncs per file,
// which made a call's fsyncs grow with its claims. These files need none,
// for the reasons a spec needs none (see cdi.Writer): a rename shows them
// whole, the page cache outlives a plugin crash, and after a reboot the
// plugin's start removes the metadata of every claim of the boot before,
// which the kubelet prepares again. sync, when set, replaces fsync (there
// is none; tests count them through it).
func MetadataFileOps(sync func(*os.File) error) kubeletplugin.MetadataFileOperations {
	return kubeletplugin.MetadataFileOperations{WriteFile: func(name string, data []byte, perm os.FileMode) error {
		return atomicfile.Write(name, data, atomicfile.Options{Perm: perm, Durability: atomicfile.SyncNone, Sync: sync})
	}}
}
