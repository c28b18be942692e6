package cluster

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/efakit/efakit/test/e2e/harness"
)

// What the fleet harness reads of the control plane: the processes' CPU
// time and memory from /proc, the scheduler's metrics and profile from
// its secure port (the admin token authorises them), etcd's size from its
// metrics.

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

// procOf is the control plane's process of a binary.
func procOf(c *harness.ControlPlane, name string) *exec.Cmd {
	for _, p := range c.Procs {
		if filepath.Base(p.Path) == name {
			return p
		}
	}
	return nil
}

// procCPU is a process's CPU time so far: the sum of its threads' time on
// a CPU in nanoseconds (proc(5) /proc/PID/task/TID/schedstat, first
// field). proc(5) stat's user and system time count whole clock ticks of
// 10 ms, which a burst of 24 plain pods (about 10 ms of the scheduler's
// CPU) can end below. A thread that exits takes its time with it; the
// Go runtime keeps its threads, so a delta between two readings of a
// control plane binary is its CPU time. Where the kernel keeps no
// schedstat (no CONFIG_SCHED_INFO), stat's ticks.
func procCPU(t *testing.T, p *exec.Cmd) time.Duration {
	t.Helper()
	require.NotNil(t, p)
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.Process.Pid))
	require.NoError(t, err)
	var ns int64
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited meanwhile
		}
		v, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		require.NoError(t, err, "%s", f)
		ns += v
	}
	if len(tasks) > 0 {
		return time.Duration(ns)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
	require.NoError(t, err)
	// The command name, in parentheses, may hold spaces: count from its end.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err1)
	require.NoError(t, err2)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// procRSS is a process's resident memory (proc(5) status, VmRSS).
func procRSS(t *testing.T, p *exec.Cmd) int64 {
	t.Helper()
	require.NotNil(t, p)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Process.Pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", p.Process.Pid)
	return 0
}

// secureClient reaches the control plane's components on loopback with
// the admin token.
var secureClient = &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func getWithToken(url string) (*http.Response, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+harness.AdminToken)
	resp, err := secureClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return resp, nil
}

// scraper reads a component's /metrics.
type scraper struct{ url string }

func newScraper(c *harness.ControlPlane, name string) *scraper {
	switch name {
	case "kube-scheduler":
		return &scraper{url: c.Scheduler + "/metrics"}
	case "etcd":
		return &scraper{url: c.Etcd + "/metrics"}
	}
	return &scraper{url: c.URL + "/metrics"}
}

func (s *scraper) scrape() (harness.MetricsSnapshot, error) {
	var resp *http.Response
	var err error
	if strings.HasPrefix(s.url, "https:") {
		resp, err = getWithToken(s.url)
	} else {
		resp, err = http.Get(s.url)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return harness.ParseMetrics(resp.Body)
}

// etcdInUse is the part of etcd's database in use
// (etcd_mvcc_db_total_size_in_use_in_bytes).
func etcdInUse(t *testing.T, c *harness.ControlPlane) int64 {
	t.Helper()
	m, err := newScraper(c, "etcd").scrape()
	require.NoError(t, err)
	return int64(m.Value("etcd_mvcc_db_total_size_in_use_in_bytes", nil))
}

// profileScheduler takes a CPU profile of kube-scheduler (its
// /debug/pprof, on by default) from now until the returned function is
// called, into dir/name.pprof; nothing when dir is "".
func profileScheduler(t *testing.T, c *harness.ControlPlane, dir, name string) func() {
	if dir == "" {
		return func() {}
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	start := time.Now()
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		// In parts of ten seconds, until the burst ends.
		part := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := getWithToken(c.Scheduler + "/debug/pprof/profile?seconds=10")
			if err != nil {
				t.Logf("profile of the scheduler: %v", err)
				return
			}
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%02d.pprof", name, part)))
			if err == nil {
				_, _ = io.Copy(f, resp.Body)
				f.Close()
			}
			resp.Body.Close()
			part++
		}
	}()
	return func() {
		close(stop)
		<-done
		t.Logf("scheduler profiles of %s in %s (%s; merge with go tool pprof -proto %s/%s-*.pprof)", name, dir, time.Since(start).Round(time.Second), dir, name)
	}
}
