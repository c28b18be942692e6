package claims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimenv"
)

// LockDataDir takes the helper's lock, so that restoring never runs
// beside a prepare or unprepare of the plugin pod that is being replaced.
// The lock is held only around one call, so the wait is short; when it is
// not free at once, the plugin says whose lock it waits for, so a start
// that waits is never silent.
func LockDataDir(ctx context.Context, dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lockFileName)
	f, err := fileutil.TryLockFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if errors.Is(err, fileutil.ErrLocked) {
		start := time.Now()
		klog.FromContext(ctx).Info("Waiting for the data directory's lock (a prepare or unprepare of another plugin pod holds it)", "path", path)
		f, err = fileutil.LockFile(path, os.O_RDWR|os.O_CREATE, 0o666)
		if err == nil {
			klog.FromContext(ctx).Info("Took the data directory's lock", "path", path, "waited", time.Since(start))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}

// restore makes the files match the checkpoint after a start. Claims
// prepared before a plugin restart stay prepared:
//   - each claim's EFAs are checked against sysfs (a module reload may have
//     numbered them anew) and its spec is written again where it is missing
//     (the CDI directory is often a tmpfs) or its numbers changed;
//   - the device-metadata spec of each of its requests is written again
//     where the helper's metadata file survives in the data directory but
//     the spec does not: the kubelet does not prepare a claim again after a
//     plugin restart, and a container restart needs every CDI device the
//     prepare result named;
//   - at a start (cleanup), what no checkpointed claim owns is removed:
//     temporary files of interrupted writes, specs and metadata of claims
//     the checkpoint does not hold (a crash between a spec and the
//     checkpoint, a claim from before a reboot). A repair while the plugin
//     runs only writes back: without POD_UID the helper takes no lock
//     around its calls, so a temporary file or a spec there may be a
//     prepare's write in flight (its metadata spec is written after the
//     checkpoint), and removing it failed that prepare.
func (s *State) restore(ctx context.Context, cleanup bool) []error {
	errs, _ := s.restoreClaims(ctx, cleanup)
	return errs
}

// restoreClaims is restore, returning also each claim's EFAs that were
// renumbered, by claim UID.
func (s *State) restoreClaims(ctx context.Context, cleanup bool) ([]error, map[string][]renumbering) {
	logger := klog.FromContext(ctx)
	var errs []error
	moved := map[string][]renumbering{}
	uids := make([]string, 0, len(s.cur.Claims))
	for uid := range s.cur.Claims {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	keep := map[string]bool{}
	for _, uid := range uids {
		c := s.cur.Claims[uid]
		keep[uid] = true
		c, m, err := s.refresh(ctx, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s (%s): %w", c.Namespace, c.Name, uid, err))
		}
		if len(m) > 0 {
			moved[uid] = m
		}
		errs = append(errs, s.restoreMetadata(ctx, c)...)
	}

	if !cleanup {
		return errs, moved
	}
	files, err := s.files.CDI.List()
	if err != nil {
		return append(errs, err), moved
	}
	var removed []string
	remove := func(name string) {
		if err := s.files.CDI.RemoveName(name); err != nil {
			errs = append(errs, err)
			return
		}
		removed = append(removed, name)
	}
	for _, n := range files.Temp {
		remove(n)
	}
	for _, uid := range files.Specs {
		if !keep[uid] {
			if path, err := s.files.CDI.SpecPath(uid); err == nil {
				remove(filepath.Base(path))
			}
		}
	}
	for uid, names := range files.Metadata {
		if !keep[uid] {
			for _, n := range names {
				remove(n)
			}
		}
	}
	if s.files.DataDir != "" {
		removed = append(removed, s.removeDataLeftovers(&errs)...)
	}
	if len(removed) > 0 {
		slices.Sort(removed)
		logger.Info("Removed files of no prepared claim", "count", len(removed), "files", removed)
	}
	return errs, moved
}

// metadataRequests lists the requests of a claim, each once, with the
// helper's metadata file for it in the data directory.
func (s *State) metadataRequests(c checkpoint.Claim) (reqs, hosts []string) {
	for _, d := range c.Devices {
		if r := claimenv.BaseRequest(d.Request); !slices.Contains(reqs, r) {
			reqs = append(reqs, r)
			hosts = append(hosts, metadataFile(s.files.DataDir, c.Namespace, c.Name, r))
		}
	}
	return reqs, hosts
}

// metadataMissing tells whether a request of the claim has its metadata
// file in the data directory but no metadata spec.
func (s *State) metadataMissing(c checkpoint.Claim) bool {
	if s.files.DataDir == "" {
		return false
	}
	reqs, hosts := s.metadataRequests(c)
	for i, req := range reqs {
		if _, err := os.Stat(hosts[i]); err != nil {
			continue
		}
		if ok, err := s.files.CDI.MetadataExists(c.UID, req); err != nil || !ok {
			return true
		}
	}
	return false
}

// restoreMetadata writes again the metadata spec of each request of a
// claim whose metadata file the helper left in the data directory.
func (s *State) restoreMetadata(ctx context.Context, c checkpoint.Claim) []error {
	if s.files.DataDir == "" {
		return nil
	}
	var errs []error
	reqs, hosts := s.metadataRequests(c)
	for i, req := range reqs {
		host := hosts[i]
		data, err := os.ReadFile(host)
		if errors.Is(err, fs.ErrNotExist) {
			continue // metadata off, or never written: nothing names it
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err))
			continue
		}
		if ok, err := s.files.CDI.MetadataExists(c.UID, req); err != nil || ok {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		ctr := metadata.ResourceClaimFilePath(s.node.Driver, c.Name, req)
		if pc := podClaimName(data); pc != "" {
			ctr = metadata.ResourceClaimTemplateFilePath(s.node.Driver, pc, req)
		}
		if _, err := s.files.CDI.WriteMetadata(c.UID, req, host, ctr); err != nil {
			errs = append(errs, err)
			continue
		}
		s.deps.Metrics.SpecsRestored.Inc()
		klog.FromContext(ctx).Info("Wrote a lost device-metadata CDI spec again", "claim", klog.KRef(c.Namespace, c.Name), "request", req)
	}
	return errs
}

// podClaimName reads the pod claim name from a metadata file (a JSON
// stream of DeviceMetadata objects, one per API version, all with the same
// podClaimName): the container path of a template claim's metadata uses it.
func podClaimName(data []byte) string {
	var first struct {
		PodClaimName *string `json:"podClaimName"`
	}
	if json.NewDecoder(bytes.NewReader(data)).Decode(&first) != nil || first.PodClaimName == nil {
		return ""
	}
	return *first.PodClaimName
}

// removeDataLeftovers removes the checkpoint's temporary files and the
// metadata directories of claims the checkpoint does not hold.
func (s *State) removeDataLeftovers(errs *[]error) []string {
	var removed []string
	ents, err := os.ReadDir(s.files.DataDir)
	if err != nil {
		*errs = append(*errs, err)
		return nil
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "."+checkpoint.FileName+".") && strings.HasSuffix(n, ".tmp") {
			if err := os.Remove(filepath.Join(s.files.DataDir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				*errs = append(*errs, err)
				continue
			}
			removed = append(removed, n)
		}
	}
	keep := map[string]bool{}
	for _, c := range s.cur.Claims {
		keep[metadataClaimDir(c.Namespace, c.Name)] = true
	}
	dir := filepath.Join(s.files.DataDir, metadataDirName)
	ents, err = os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			*errs = append(*errs, err)
		}
		return removed
	}
	for _, e := range ents {
		if keep[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			*errs = append(*errs, err)
			continue
		}
		removed = append(removed, filepath.Join(metadataDirName, e.Name()))
	}
	return removed
}
