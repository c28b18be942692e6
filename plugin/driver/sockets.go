package driver

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/claims"
)

// A plugin pod that is killed (SIGKILL, an OOM kill, a node losing power)
// leaves its sockets behind: its registration socket in the kubelet's
// registry directory (<driver>-<pod UID>-reg.sock with rolling updates),
// which the kubelet then dials with a backoff for as long as it exists,
// and its DRA socket in the plugin's directory (dra-<pod UID>.sock). Each
// new pod has a new UID, so a crash loop or a rolling update after a kill
// adds one of each every time. The helper removes only its own name.

// socketDialTimeout bounds the dial that tells a served socket from one
// left behind.
const socketDialTimeout = time.Second

// removeStaleSockets removes this driver's sockets that no process answers
// on, from the registry directory (registrar) and the plugin's directory
// (dataDir), and says which. A socket that answers is another plugin pod's
// (a rolling update's) and stays, and so does one whose dial fails in any
// other way than a refusal (it cannot be told apart), and every file that
// is not a socket. A dial is refused twice, a moment apart, before a
// socket goes: a pod starting beside this one binds its socket a moment
// before it listens.
//
// Which sockets are this driver's: claims.SocketPatterns.
func removeStaleSockets(ctx context.Context, registrar, dataDir, driverName string) []string {
	logger := klog.FromContext(ctx)
	var candidates []string
	for _, pattern := range claims.SocketPatterns(registrar, dataDir, driverName) {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	slices.Sort(candidates)
	candidates = slices.Compact(candidates)
	var stale []string
	for _, path := range candidates {
		if st, err := os.Lstat(path); err != nil || st.Mode().Type() != fs.ModeSocket {
			continue
		}
		if !refused(path) {
			continue
		}
		stale = append(stale, path)
	}
	if len(stale) == 0 {
		return nil
	}
	time.Sleep(100 * time.Millisecond)
	var removed []string
	for _, path := range stale {
		if !refused(path) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			logger.Error(err, "Removing a socket no process answers on", "path", path)
			continue
		}
		removed = append(removed, path)
	}
	if len(removed) > 0 {
		logger.Info("Removed sockets of plugin pods that are gone", "count", len(removed), "sockets", removed)
	}
	return removed
}

// refused tells whether a dial of the unix socket at path is refused:
// nothing listens on it.
func refused(path string) bool {
	conn, err := net.DialTimeout("unix", path, socketDialTimeout)
	if err == nil {
		_ = conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
