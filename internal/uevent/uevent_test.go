package uevent

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// msg joins a header and fields as the kernel sends them.
func msg(header string, fields ...string) []byte {
	return []byte(header + "\x00" + strings.Join(fields, "\x00") + "\x00")
}

// bindEFA is what the kernel sends when the efa driver binds a function.
var bindEFA = msg("bind@/devices/pci0000:00/0000:00:06.0", "ACTION=bind",
	"DEVPATH=/devices/pci0000:00/0000:00:06.0", "SUBSYSTEM=pci", "DRIVER=efa",
	"PCI_CLASS=20000", "PCI_ID=1D0F:EFA1", "PCI_SLOT_NAME=0000:00:06.0", "SEQNUM=4242")

func TestParse(t *testing.T) {
	t.Parallel()
	ev, err := Parse(bindEFA)
	require.NoError(t, err)
	assert.Equal(t, Event{Action: "bind", DevPath: "/devices/pci0000:00/0000:00:06.0", Subsystem: "pci", Seqnum: 4242,
		Env: map[string]string{"ACTION": "bind", "DEVPATH": "/devices/pci0000:00/0000:00:06.0", "SUBSYSTEM": "pci",
			"DRIVER": "efa", "PCI_CLASS": "20000", "PCI_ID": "1D0F:EFA1", "PCI_SLOT_NAME": "0000:00:06.0", "SEQNUM": "4242"}}, ev)

	// No SEQNUM and no trailing NUL: still an event.
	ev, err = Parse([]byte("remove@/devices/virtual/infiniband_verbs/uverbs0\x00SUBSYSTEM=infiniband_verbs\x00MAJOR=231"))
	require.NoError(t, err)
	assert.Equal(t, "remove", ev.Action)
	assert.Equal(t, "infiniband_verbs", ev.Subsystem)
	assert.Zero(t, ev.Seqnum)

	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "empty message"},
		{"udevd", []byte("libudev\x00\xfe\xed\xca\xfe"), "udevd"},
		{"no at", msg("add /devices/x", "SUBSYSTEM=pci"), `no "@" in header "add /devices/x"`},
		{"no action", msg("@/devices/x", "SUBSYSTEM=pci"), "no action"},
		{"relative path", msg("add@devices/x", "SUBSYSTEM=pci"), `device path "devices/x"`},
		{"not key=value", msg("add@/devices/x", "SUBSYSTEM=pci", "JUNK"), `field "JUNK" is not KEY=VALUE`},
		{"empty key", msg("add@/devices/x", "SUBSYSTEM=pci", "=1"), `field "=1"`},
		{"twice", msg("add@/devices/x", "SUBSYSTEM=pci", "SUBSYSTEM=net"), `"SUBSYSTEM" given twice`},
		{"action differs", msg("add@/devices/x", "ACTION=remove", "SUBSYSTEM=pci"), `ACTION="remove" differs`},
		{"devpath differs", msg("add@/devices/x", "DEVPATH=/devices/y", "SUBSYSTEM=pci"), `DEVPATH="/devices/y" differs`},
		{"no subsystem", msg("add@/devices/x", "ACTION=add"), "no SUBSYSTEM"},
		{"bad seqnum", msg("add@/devices/x", "SUBSYSTEM=pci", "SEQNUM=-1"), `SEQNUM="-1" is not a number`},
		{"long header", msg("add " + strings.Repeat("x", 200)), `x"...`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.in)
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

// FuzzParse: no message panics; an error is ErrMalformed and one line; an
// event holds what its header and fields say.
func FuzzParse(f *testing.F) {
	f.Add(bindEFA)
	f.Add(msg("add@/devices/pci0000:00/0000:00:06.0/infiniband/rdmap0s6", "ACTION=add", "SUBSYSTEM=infiniband", "NAME=rdmap0s6", "SEQNUM=7"))
	f.Add([]byte("libudev\x00\xfe\xed\xca\xfe"))
	f.Add(msg("change@/devices/x", "SUBSYSTEM=pci", "SYNTH_UUID=0", "SEQNUM=18446744073709551616"))
	f.Add([]byte("add@/x\x00SUBSYSTEM=pci\x00\x00\x00A==\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: %v", b, err)
			}
			return
		}
		header, _, _ := strings.Cut(string(b), "\x00")
		if header != ev.Action+"@"+ev.DevPath || ev.Subsystem == "" || ev.Env["SUBSYSTEM"] != ev.Subsystem {
			t.Fatalf("%q: %+v", b, ev)
		}
	})
}

// pciUevent is a PCI function's uevent file to write synthetic uevents
// to, or the test is skipped saying why.
func pciUevent(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob("/sys/bus/pci/devices/*/uevent")
	for _, f := range files {
		if unix.Access(f, unix.W_OK) == nil {
			return f
		}
	}
	t.Skip("no writable /sys/bus/pci/devices/*/uevent (needs root and a writable /sys)")
	return ""
}

func openOrSkip(t *testing.T) *Conn {
	t.Helper()
	c, err := Open()
	if err != nil {
		t.Skipf("cannot open a uevent socket here: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// synthesize writes a synthetic "change" uevent (Linux 4.13 and later) to
// file and returns its UUID. The kernel sends an argument KEY=VALUE as
// SYNTH_ARG_KEY, and refuses a key with anything but letters and digits.
func synthesize(t *testing.T, file string) string {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	if err := os.WriteFile(file, []byte("change "+uuid+" EFAKITTEST=1"), 0); err != nil {
		t.Skipf("cannot write a synthetic uevent to %s: %v", file, err)
	}
	return uuid
}

// waitFor receives until the event of uuid, for at most a second.
func waitFor(t *testing.T, c *Conn, uuid string) Event {
	t.Helper()
	got := make(chan Event, 1)
	go func() {
		for {
			ev, err := c.Receive()
			if err != nil && !errors.Is(err, ErrLost) && !errors.Is(err, ErrMalformed) {
				return
			}
			if err == nil && ev.Env["SYNTH_UUID"] == uuid {
				got <- ev
				return
			}
		}
	}()
	select {
	case ev := <-got:
		return ev
	case <-time.After(time.Second):
		c.Close()
		t.Fatalf("no uevent with SYNTH_UUID=%s within a second", uuid)
		return Event{}
	}
}

// TestSynthetic: a real socket receives, within a second, the uevent the
// kernel sends for a write to a PCI function's uevent file.
func TestSynthetic(t *testing.T) {
	t.Parallel()
	file := pciUevent(t)
	c := openOrSkip(t)
	n, err := c.RecvBufferBytes()
	require.NoError(t, err)
	assert.Positive(t, n)
	uuid := synthesize(t, file)
	ev := waitFor(t, c, uuid)
	assert.Equal(t, "change", ev.Action)
	assert.Equal(t, "pci", ev.Subsystem)
	assert.Equal(t, "1", ev.Env["SYNTH_ARG_EFAKITTEST"])
	real, err := filepath.EvalSymlinks(filepath.Dir(file))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimPrefix(real, "/sys"), ev.DevPath)
	assert.Positive(t, ev.Seqnum)
}

// TestSyntheticInNewNetns: a socket opened in a network namespace of its
// own (a pod without hostNetwork) still receives a PCI function's uevents.
func TestSyntheticInNewNetns(t *testing.T) {
	t.Parallel()
	file := pciUevent(t)
	opened := make(chan error, 1)
	var c *Conn
	go func() {
		// The thread leaves the host's namespace and is never reused:
		// without UnlockOSThread it ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			opened <- err
			return
		}
		var err error
		c, err = Open()
		opened <- err
	}()
	if err := <-opened; err != nil {
		t.Skipf("cannot open a uevent socket in a new network namespace: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ev := waitFor(t, c, synthesize(t, file))
	assert.Equal(t, "pci", ev.Subsystem)
}

// inUserns, set by inChild, makes the test binary a child: it opens a socket, says "ready" and waits a second for the
// uevent of the UUID on its stdin.
const inUserns = "EFAKIT_UEVENT_IN_USERNS"

func TestMain(m *testing.M) {
	if os.Getenv(inUserns) != "1" {
		os.Exit(m.Run())
	}
	c, err := Open()
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	var uuid string
	fmt.Scanln(&uuid)
	time.AfterFunc(time.Second, func() { c.Close() })
	for {
		ev, err := c.Receive()
		if errors.Is(err, ErrClosed) {
			fmt.Println("none")
			os.Exit(0)
		}
		if ev.Env["SYNTH_UUID"] == uuid {
			fmt.Println("received")
			os.Exit(0)
		}
	}
}

// TestNoneInNewUserns: a socket in a network namespace owned by a user
// namespace of its own (a pod with hostUsers: false) receives no uevent
// of a PCI function, while the same child in a new network namespace of
// the initial user namespace does.
func TestNoneInNewUserns(t *testing.T) {
	t.Parallel()
	file := pciUevent(t)
	assert.Equal(t, "received\n", inChild(t, file, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}))
	assert.Equal(t, "none\n", inChild(t, file, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}}))
}

// inChild runs the test binary as the child of TestMain in the namespaces
// attr makes, sends a synthetic uevent through file, and returns what the
// child says.
func inChild(t *testing.T, file string, attr *syscall.SysProcAttr) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), inUserns+"=1")
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process in new namespaces: %v", err)
	}
	w.Close()
	line := make([]byte, 6)
	if _, err := io.ReadFull(r, line); err != nil || string(line) != "ready\n" {
		_ = cmd.Wait()
		t.Skipf("no uevent socket in the child: %q %v", line, err)
	}
	uuid := synthesize(t, file)
	fmt.Fprintln(stdin, uuid)
	var out strings.Builder
	_, _ = io.Copy(&out, r)
	require.NoError(t, cmd.Wait())
	return out.String()
}

// TestOverflowIsLost: when the receive buffer overflows, Receive says
// events were lost, and the socket goes on receiving.
func TestOverflowIsLost(t *testing.T) {
	t.Parallel()
	file := pciUevent(t)
	c := openOrSkip(t)
	// The smallest buffer the kernel grants (it doubles it, to a few KiB).
	require.NoError(t, c.rc.Control(func(fd uintptr) {
		require.NoError(t, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 0))
	}))
	for range 100 {
		synthesize(t, file)
	}
	lost := false
	for range 100 {
		_, err := c.Receive()
		if errors.Is(err, ErrLost) {
			lost = true
			break
		}
		require.NoError(t, err)
	}
	require.True(t, lost, "no ErrLost after 100 uevents into a minimal buffer")
	// Still receiving once what is queued is read: until the queue is
	// empty the kernel counts the socket congested and drops what comes.
	require.NoError(t, c.f.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	for {
		if _, err := c.Receive(); errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
	}
	require.NoError(t, c.f.SetReadDeadline(time.Time{}))
	uuid := synthesize(t, file)
	assert.Equal(t, uuid, waitFor(t, c, uuid).Env["SYNTH_UUID"])
}

// TestCloseWakesReceive: Close ends a Receive that waits.
func TestCloseWakesReceive(t *testing.T) {
	t.Parallel()
	c := openOrSkip(t)
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := c.Receive(); errors.Is(err, ErrClosed) || (err != nil && !errors.Is(err, ErrLost) && !errors.Is(err, ErrMalformed)) {
				done <- err
				return
			}
		}
	}()
	time.Sleep(10 * time.Millisecond) // let it wait (either way Close must end it)
	require.NoError(t, c.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Receive still waits after Close")
	}
}
