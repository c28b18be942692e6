package claims

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// A prepared claim's CDI specs must exist for as long as the claim is
// prepared: the kubelet prepares a claim once per pod, but the runtime
// reads the specs again at every container start, so a container that
// restarts after its spec was removed fails ("unresolvable CDI devices")
// and stays in CrashLoopBackOff. Specs are lost while the plugin runs when
// an operator or a cleanup job empties the CDI directory (often a tmpfs,
// /var/run/cdi). WatchCDI puts them back within a moment; restore does the
// same when the plugin starts.

// repairDelay gathers a burst of removals (rm -rf) into one repair.
const repairDelay = 50 * time.Millisecond

// WatchCDI watches the CDI directory until ctx ends and writes again the
// specs of prepared claims that go missing (see RepairSpecs). Removals are
// seen through inotify; every check interval (and when the watch fails,
// for example because the directory itself was removed) the specs are
// checked directly, so nothing stays lost longer than that.
func (s *State) WatchCDI(ctx context.Context, check time.Duration) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(check)
	defer tick.Stop()
	s.CheckStorage(ctx)
	for ctx.Err() == nil {
		w, err := s.watchDir()
		if err != nil {
			logger.Error(err, "Watching the CDI directory failed", "then", "checking its specs every interval instead", "dir", s.files.CDI.Dir(), "interval", check)
		}
		s.repairIfMissing(ctx)
		s.watchLoop(ctx, w, tick.C)
		if w != nil {
			_ = w.Close()
		}
	}
}

// watchDir makes the CDI directory if it is gone and watches it.
func (s *State) watchDir() (*fsnotify.Watcher, error) {
	if err := os.MkdirAll(s.files.CDI.Dir(), 0o755); err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(s.files.CDI.Dir()); err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

// watchLoop repairs after removals until ctx ends or the watch ends (the
// directory was removed or moved: the caller watches it anew).
func (s *State) watchLoop(ctx context.Context, w *fsnotify.Watcher, tick <-chan time.Time) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	var delay <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			s.CheckStorage(ctx)
			s.repairIfMissing(ctx)
			if w == nil {
				return // try to watch again
			}
		case <-s.checkFiles:
			s.CheckStorage(ctx)
		case <-errs:
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Name == s.files.CDI.Dir() && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return
			}
			if ev.Has(fsnotify.Remove|fsnotify.Rename) && delay == nil {
				delay = time.After(repairDelay)
			}
		case <-delay:
			delay = nil
			s.repairIfMissing(ctx)
		}
	}
}

// repairIfMissing runs RepairSpecs when a prepared claim lacks a spec.
func (s *State) repairIfMissing(ctx context.Context) {
	if !s.specsMissing() {
		return
	}
	if err := s.RepairSpecs(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Writing lost CDI specs again failed")
	}
}

// specsMissing tells whether the spec of a prepared claim, or a
// device-metadata spec of one, is gone.
// It reads the state last saved: a claim in a call is checked once saved.
func (s *State) specsMissing() bool {
	for uid, c := range s.Committed().Claims {
		if len(c.Devices) == 0 {
			continue
		}
		if ok, err := s.files.CDI.Exists(uid); err != nil || !ok {
			return true
		}
		if s.metadataMissing(c) {
			return true
		}
	}
	return false
}

// RepairSpecs writes again every lost spec and device-metadata spec of the
// prepared claims, as at a start (restore), holding the lock the kubelet
// plugin helper holds around each prepare and unprepare, so it never runs
// beside one. Each spec written again is logged and counted in
// efakit_plugin_cdi_specs_restored_total; an EFA found renumbered gets its
// spec corrected (see refresh), and an Event names the claim's pods.
func (s *State) RepairSpecs(ctx context.Context) error {
	moved, err := s.repair(ctx)
	s.reportRenumbered(ctx, moved)
	return err
}

// repair is RepairSpecs without the Events: it returns each claim's EFAs
// that were renumbered.
func (s *State) repair(ctx context.Context) ([]claimRenumbered, error) {
	if s.files.DataDir != "" {
		unlock, err := LockDataDir(ctx, s.files.DataDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// During a rolling update the other plugin pod may have prepared or
	// unprepared claims since this one last read the checkpoint: restore
	// from the checkpoint as it is now, or it would remove the specs of
	// claims it does not know yet.
	s.reloadState(ctx)
	errs, moved := s.restoreClaims(ctx, false)
	var out []claimRenumbered
	for uid, m := range moved {
		c := s.cur.Claims[uid]
		out = append(out, claimRenumbered{UID: uid, Namespace: c.Namespace, Name: c.Name, Devices: m})
	}
	slices.SortFunc(out, func(a, b claimRenumbered) int { return strings.Compare(a.UID, b.UID) })
	return out, errors.Join(errs...)
}
