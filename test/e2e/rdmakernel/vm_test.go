//go:build !rdmaguest

// Package rdmakernel runs efakit against a real Linux RDMA stack: Debian
// 12's own kernel, booted under qemu with soft-RoCE (rdma_rxe), ib_uverbs,
// RDMA netlink and devtmpfs's /dev/infiniband. TestRDMAKernel, on the host,
// builds the guest's binaries, boots the VM (tools/rdma-vm) and runs the
// guest's tests (guest_test.go, build tag rdmaguest) inside it as PID 1's
// child, with the host's root shared read-only under a tmpfs overlay.
package rdmakernel

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// guestRun is what TestRDMAKernel asks the guest to run: its tests
// (EFAKIT_RDMA_RUN, a -test.run pattern; all by default).
func guestRun() string {
	if r := os.Getenv("EFAKIT_RDMA_RUN"); r != "" {
		return r
	}
	return "."
}

// accel is qemu's accelerator: KVM where the CPU has hardware
// virtualization (vmx, svm) and /dev/kvm opens, else software emulation.
// A /dev/kvm without those flags (a paravirtual KVM) fails a stock
// kernel's early instructions; EFAKIT_RDMA_ACCEL forces either.
func accel() string {
	if a := os.Getenv("EFAKIT_RDMA_ACCEL"); a != "" {
		return a
	}
	cpu, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || !regexp.MustCompile(`(?m)^flags\s*:.*\b(vmx|svm)\b`).Match(cpu) {
		return "tcg"
	}
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
		f.Close()
		return "kvm"
	}
	return "tcg"
}

func TestRDMAKernel(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the VM is Debian's amd64 kernel")
	}
	if os.Geteuid() != 0 {
		t.Skip("builds the VM's files with apt-get and boots it as root")
	}
	repo, err := filepath.Abs("../../..")
	require.NoError(t, err)

	start := time.Now()
	out, err := exec.Command("sh", filepath.Join(repo, "tools/rdma-vm/assets.sh")).Output()
	require.NoError(t, err, "tools/rdma-vm/assets.sh: %s", stderrOf(err))
	assets := strings.TrimSpace(string(out))
	t.Logf("VM files (tools/rdma-vm/assets.sh): %s, %s", assets, time.Since(start).Round(10*time.Millisecond))

	// The guest's binaries, static (CGO_ENABLED=0): they run over the
	// host's root, read-only, so the temporary directory is seen there too.
	start = time.Now()
	bins := t.TempDir()
	build := func(dir string, args ...string) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in %s:\n%s", strings.Join(args, " "), dir, b)
	}
	build(".", "test", "-c", "-tags", "rdmaguest", "-o", filepath.Join(bins, "guest.test"), ".")
	build(filepath.Join(repo, "plugin"), "build", "-o", bins+"/", "./cmd/efakit")
	// containerd with CDI, its runc shim and ctr: the e2e's own build.
	build(filepath.Join(repo, "test/e2e/runtime"), "build", "-tags", "no_btrfs no_devmapper no_zfs", "-ldflags", "-s -w", "-o", bins+"/",
		"github.com/containerd/containerd/v2/cmd/containerd", "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		"github.com/containerd/containerd/v2/cmd/ctr")
	runc, err := exec.LookPath("runc")
	require.NoError(t, err, "runc (Debian's runc; make e2e-deps installs it)")
	t.Logf("guest binaries built: %s", time.Since(start).Round(10*time.Millisecond))

	pkg, err := os.Getwd()
	require.NoError(t, err)
	script := filepath.Join(bins, "run.sh")
	require.NoError(t, os.WriteFile(script, fmt.Appendf(nil, `cd %s
echo "efakit-vm: up $(cut -d' ' -f1 /proc/uptime)"
PATH=%s:%s:$PATH EFAKIT_BIN=%s %s -test.v -test.count=1 -test.timeout=10m -test.run '%s'
`, pkg, bins, filepath.Dir(runc), bins, filepath.Join(bins, "guest.test"), guestRun()), 0o755))

	kernel := filepath.Join(assets, "vmlinux")
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(assets, "vmlinuz")
	}
	acc := accel()
	cpu := "max"
	if acc == "kvm" {
		cpu = "host"
	}
	args := []string{"-accel", acc, "-cpu", cpu,
		"-smp", "1", "-m", "1024", "-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", filepath.Join(assets, "initramfs.cpio.gz"),
		"-append", "console=ttyS0 quiet panic=-1 efakit.run=" + script,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"}
	cmd := exec.Command("qemu-system-x86_64", args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	booted := time.Now()
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	timer := time.AfterFunc(15*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()

	// The guest's console: its tests' -v output, then the exit code.
	var lines []string
	var up, guestUp time.Duration
	exit := -1
	passed := regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	var steps []string
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		t.Log("guest| " + line)
		switch {
		case strings.HasPrefix(line, "efakit-vm: up "):
			up = time.Since(booted)
			if s, err := strconv.ParseFloat(strings.TrimPrefix(line, "efakit-vm: up "), 64); err == nil {
				guestUp = time.Duration(s * float64(time.Second))
			}
		case strings.HasPrefix(line, "efakit-vm: exit "):
			exit, _ = strconv.Atoi(strings.TrimPrefix(line, "efakit-vm: exit "))
		}
		if m := passed.FindStringSubmatch(line); m != nil {
			steps = append(steps, fmt.Sprintf("%s %ss (%s)", m[2], m[3], m[1]))
		}
	}
	require.NoError(t, <-done, "qemu")
	total := time.Since(booted)
	t.Logf("the VM (%s): %s from qemu's start to the guest's tests (the kernel up %s), %s in all", acc, up.Round(10*time.Millisecond), guestUp.Round(10*time.Millisecond), total.Round(10*time.Millisecond))
	for _, s := range steps {
		t.Log("  " + s)
	}
	require.Equal(t, 0, exit, "the guest's tests exit 0; the console's last lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
