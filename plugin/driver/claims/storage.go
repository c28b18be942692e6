package claims

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/efakit/efakit/plugin/driver/events"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// A prepare writes a CDI spec in the CDI directory and the checkpoint in
// the plugin's directory; neither is possible on a read-only or full file
// system, and a prepare then fails (the kubelet retries it). Nothing a
// failed prepare wrote stays: each file is written to a temporary name and
// renamed, the temporary file removed on failure, and a claim's spec goes
// again when its checkpoint cannot be saved. What the kubelet cannot show
// is why every prepare on the node fails: the plugin checks both
// directories with the health checks and says so in /readyz (the pod turns
// NotReady), the log, efakit_plugin_storage_writable and an Event on the
// Node.

// minFree is the free space below which a directory counts as full: a
// prepare writes a few kilobytes (a spec of 32 EFAs, the device metadata),
// a checkpoint of a full node some 20 kB.
const minFree = 64 << 10

// dirProblem tells why the plugin cannot write in dir, "" when it can: its
// file system is read-only, has less than minFree bytes free for the
// plugin, or no free inode. statfs(2) tells without writing (a write in
// the CDI directory would wake every runtime's spec watch).
func dirProblem(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Sprintf("%s: %v", dir, err)
	}
	switch {
	case st.Flags&unix.ST_RDONLY != 0:
		return dir + " is on a read-only file system"
	case uint64(st.Bavail)*uint64(st.Bsize) < minFree:
		return fmt.Sprintf("%s has %d bytes free (its file system is full)", dir, uint64(st.Bavail)*uint64(st.Bsize))
	case st.Files > 0 && st.Ffree == 0:
		return dir + " has no free inode (its file system is full)"
	}
	return ""
}

// CheckStorage checks the CDI and plugin directories and remembers why
// they cannot be written; a change is logged, counted and recorded as an
// Event once.
func (s *State) CheckStorage(ctx context.Context) {
	dirs := []struct{ label, path string }{{"cdi", s.files.CDI.Dir()}, {"data", s.files.DataDir}}
	var problems []string
	for _, d := range dirs {
		if d.path == "" {
			continue
		}
		why := dirProblem(d.path)
		ok := 1.0
		if why != "" {
			ok = 0
			problems = append(problems, why)
		}
		s.deps.Metrics.StorageWritable.WithLabelValues(d.label).Set(ok)
	}
	now := strings.Join(problems, "; ")
	was := ""
	if old := s.storage.Swap(&now); old != nil {
		was = *old
	}
	if now == was {
		return
	}
	logger := klog.FromContext(ctx)
	if now != "" {
		logger.Error(errors.New(now), "Prepares fail until the plugin can write its files again")
		s.deps.Events.Record(corev1.EventTypeWarning, events.ReasonStorage, "", "efakit cannot prepare EFAs on this node: "+now)
		return
	}
	logger.Info("The plugin can write its files again", "was", was)
	s.deps.Events.Record(corev1.EventTypeNormal, events.ReasonStorage, "", "efakit can prepare EFAs on this node again; before, "+was)
}

// StorageProblem is why the plugin cannot write its files ("" when it
// can), from the last check.
func (s *State) StorageProblem() string {
	if why := s.storage.Load(); why != nil {
		return *why
	}
	return ""
}

// storageError says, for an error of a write, what the user can do: a
// read-only or full file system fails every prepare on the node until it
// is fixed. It asks for a check of the directories then (WatchFiles), and
// never blocks.
func (s *State) storageError(err error) error {
	var hint string
	switch {
	case errors.Is(err, syscall.EROFS):
		hint = "the directory is read-only: make it writable; the kubelet retries the prepare"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		hint = "the file system is full: free space; the kubelet retries the prepare"
	default:
		return err
	}
	select {
	case s.checkFiles <- struct{}{}:
	default:
	}
	return fmt.Errorf("%w (%s)", err, hint)
}
