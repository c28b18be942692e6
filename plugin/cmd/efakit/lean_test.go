package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/internal/testfixture"
	"github.com/efakit/efakit/sysfs"
)

// forbidden are what the CLI must not link: the plugin's Kubernetes
// client, gRPC and metrics. The API types (k8s.io/api, apimachinery) are
// fine: slices and claims print them.
var forbidden = []string{"k8s.io/client-go", "google.golang.org/grpc", "github.com/prometheus/client_golang"}

// TestLinksNoClientGRPCOrMetrics: `go list -deps` of the CLI holds none of
// the forbidden packages; a failure names the packages that import them.
func TestLinksNoClientGRPCOrMetrics(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	require.NoError(t, err, "go list: %s", exitStderr(err))
	isForbidden := func(p string) bool {
		for _, f := range forbidden {
			if p == f || strings.HasPrefix(p, f+"/") {
				return true
			}
		}
		return false
	}
	var linked, edges []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if isForbidden(fields[0]) {
			linked = append(linked, fields[0])
			continue
		}
		for _, imp := range fields[1:] {
			if isForbidden(imp) {
				edges = append(edges, fields[0]+" imports "+imp)
			}
		}
	}
	assert.Zero(t, len(linked), "efakit links %d forbidden packages; the first steps in: %s", len(linked), strings.Join(edges, "; "))
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// cliDir holds the efakit binary buildCLI builds, once for the package's
// tests (they run in parallel, and two go builds of one package at once
// would each compile it); TestMain removes it.
var (
	cliDir  string
	cliOnce sync.Once
	cliErr  error
)

// buildCLI builds efakit as the image ships it (static, trimmed paths, no
// symbol table), once, and returns its path.
func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		if cliDir, cliErr = os.MkdirTemp("", "efakit-cli"); cliErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(cliDir, "efakit"), ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, cliErr)
	return filepath.Join(cliDir, "efakit")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cliDir != "" {
		_ = os.RemoveAll(cliDir)
	}
	os.Exit(code)
}

// cliEnv is the environment of a CLI run: none of the Go runtime's
// settings of the test's own environment (GOGC, GOMEMLIMIT, GODEBUG,
// GOMAXPROCS), so that memory is measured as a user runs efakit, with
// the extra settings given.
func cliEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "GOGC", "GOMEMLIMIT", "GODEBUG", "GOMAXPROCS", "PCIDB_PATH":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// pciIDsReads runs the CLI with PCIDB_PATH naming a named pipe and returns
// how many times the CLI opened it for reading, with its stdout. A reader
// of a pipe waits for a writer, so a goroutine opens it for writing
// whenever a reader waits, and writes ids, a pci.ids text; the reads are
// counted by inotify, from the closes of the pipe by a reader.
func pciIDsReads(t *testing.T, bin, ids string, args ...string) (int, string) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "pci.ids")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	in, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	require.NoError(t, err)
	defer syscall.Close(in)
	_, err = syscall.InotifyAddWatch(in, fifo, syscall.IN_CLOSE_NOWRITE)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			// ENXIO until a reader waits.
			fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			_, _ = syscall.Write(fd, []byte(ids))
			syscall.Close(fd)
			time.Sleep(5 * time.Millisecond)
		}
	})
	cmd := exec.Command(bin, args...)
	cmd.Env = cliEnv("PCIDB_PATH=" + fifo)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	close(stop)
	wg.Wait()
	require.NoError(t, runErr, "efakit %s: %s", strings.Join(args, " "), stderr.String())

	reads := 0
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(in, buf)
		if err != nil || n <= 0 {
			break
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			if binary.NativeEndian.Uint32(buf[off+4:])&syscall.IN_CLOSE_NOWRITE != 0 {
				reads++
			}
			off += syscall.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
	}
	return reads, stdout.String()
}

// testIDs is the pci.ids the pipe serves: a name for an EFA device ID that
// efakit does not have built in.
const testIDs = "1d0f  Amazon.com, Inc.\n\tefa4  EFA named by the test's pci.ids\n"

// TestNamesOnlyWhenAsked: on every fixture, whose functions all have
// built-in names, no command opens pci.ids, and the JSON still names each
// EFA; on a machine with an EFA whose name is not built in, the table
// (which prints no names) does not open it, and JSON and YAML read it
// once and print the name from it.
func TestNamesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	for name, path := range testfixture.Captures(t, "../../..") {
		for _, args := range [][]string{
			{"list", "--sysfs", path, "-o", "json"},
			{"list", "--sysfs", path, "-o", "yaml"},
			{"topo", "--sysfs", path, "-o", "json"},
			{"slices", "--sysfs", path, "--node", "node-1"},
		} {
			t.Run(name+"/"+args[0]+"/"+args[len(args)-1], func(t *testing.T) {
				t.Parallel()
				reads, out := pciIDsReads(t, bin, testIDs, args...)
				assert.Zero(t, reads, "pci.ids opened")
				if args[0] == "list" && name != "m5.xlarge" {
					assert.Contains(t, out, "Elastic Fabric Adapter (EFA)")
				}
			})
		}
	}

	b := fakesys.New()
	b.AddPCI(fakesys.PCI{Addr: "0000:10:00.0", Vendor: 0x1d0f, Device: 0xefa4, Class: 0x020000, Driver: "efa", NUMA: -1, CPUs: "0-3"})
	b.AddEFA(fakesys.EFA{Addr: "0000:10:00.0", IBName: "rdmap16s0", Rate: "400 Gb/sec (4X NDR)", NodeGUID: "0000:0000:0000:0001"})
	var capture bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&capture, []string{"an EFA with an ID efakit has no name for"}, b.Entries()))
	path := filepath.Join(t.TempDir(), "efa4.sysfs")
	require.NoError(t, os.WriteFile(path, capture.Bytes(), 0o644))
	for _, tc := range []struct {
		format string
		reads  int
	}{{"table", 0}, {"json", 1}, {"yaml", 1}} {
		t.Run("efa4/list/"+tc.format, func(t *testing.T) {
			t.Parallel()
			reads, out := pciIDsReads(t, bin, testIDs, "list", "--sysfs", path, "-o", tc.format)
			assert.Equal(t, tc.reads, reads, "pci.ids opens")
			assert.Contains(t, out, "rdmap16s0")
			if tc.reads > 0 {
				assert.Contains(t, out, "EFA named by the test's pci.ids")
			}
		})
	}
}

// maxListRSS bounds the peak RSS of `efakit list` on the p5 capture: half
// of what the CLI took before it shed the plugin's client, gRPC and
// metrics and parsed pci.ids only when asked. That binary, built as
// buildCLI builds, peaked at 33.0-36.1 MiB in three sets of 20 runs here
// (medians 33.7, 34.8 and 35.1), with 2 Ps and PCIDB_PATH at
// testdata/pci.ids; the lean one at 14.0-16.0.
const maxListRSS = 17 << 20

// TestListPeakRSS runs `efakit list` on the p5 capture five times and
// fails if a run's peak RSS (the kernel's maxrss) exceeds maxListRSS. The
// runtime's memory grows with the number of Ps, so the runs have 2, as on
// the machine the bound was measured on. efakit is started through
// testdata/maxrss: a child's maxrss includes the peak of the process that
// started it, and this test's is larger than efakit's under -race.
func TestListPeakRSS(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	helper := filepath.Join(t.TempDir(), "maxrss")
	build := exec.Command("go", "build", "-o", helper, "./testdata/maxrss")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	var peaks []string
	for range 5 {
		cmd := exec.Command(helper, bin, "list", "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs")
		cmd.Env = cliEnv("GOMAXPROCS=2", "PCIDB_PATH=../../testdata/pci.ids")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		kib, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		require.NoError(t, err)
		rss := kib << 10
		peaks = append(peaks, fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)))
		assert.LessOrEqual(t, rss, int64(maxListRSS), "peak RSS of efakit list")
	}
	t.Logf("efakit list on p5: peak RSS %s (at most %d MiB)", strings.Join(peaks, ", "), maxListRSS>>20)
}
