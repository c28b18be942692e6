// Package uevent reads the kernel's uevents: the messages a
// NETLINK_KOBJECT_UEVENT socket receives when a device is added, removed,
// bound to a driver, unbound or changed. The DRA plugin rescans sysfs on
// them instead of waiting for its next periodic scan.
//
// The kernel sends every uevent to multicast group 1 of the socket's
// network namespace; udevd sends its own, processed copies (which start
// with "libudev\0" and a binary header) to group 2, which Open does not
// join, and only messages from the kernel (netlink port 0) are read.
// Since Linux 4.18 ("netns: restrict uevents") the uevents of kobjects
// without a network namespace tag, which PCI functions and the infiniband
// and infiniband_verbs class devices are, go to every network namespace
// owned by the initial user namespace: a pod without hostNetwork receives
// them, but one in a user namespace of its own (Kubernetes' hostUsers:
// false) does not (TestSyntheticInNewNetns, TestNoneInNewUserns). Network interfaces'
// uevents are tagged and stay in their own namespace.
package uevent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Event is one uevent, as the kernel sent it.
type Event struct {
	// Action is what happened: add, remove, change, bind, unbind, move,
	// online, offline.
	Action string
	// DevPath is the device's path under /sys
	// (/devices/pci0000:00/0000:00:05.0).
	DevPath string
	// Subsystem is the kernel's SUBSYSTEM: pci, infiniband,
	// infiniband_verbs, net, module, ...
	Subsystem string
	// Seqnum is the kernel's SEQNUM, which orders events; 0 when absent.
	Seqnum uint64
	// Env holds every KEY=VALUE of the message (ACTION, DEVPATH,
	// SUBSYSTEM and SEQNUM too): DRIVER on bind, SYNTH_UUID on a uevent
	// written to a device's uevent file, ...
	Env map[string]string
}

// ErrLost says the socket's receive buffer overflowed (the kernel's
// ENOBUFS): events were lost, so whatever depends on them must look again.
// The socket goes on receiving.
var ErrLost = errors.New("events were lost: rescan")

// ErrMalformed is wrapped by the error of a message that is not a kernel
// uevent; the message is skipped and the next one can be received.
var ErrMalformed = errors.New("malformed uevent")

// ErrClosed is what Receive returns once the Conn is closed.
var ErrClosed = errors.New("uevent socket closed")

// udevPrefix starts the messages udevd sends (to group 2).
const udevPrefix = "libudev\x00"

// parse reads one message: "ACTION@DEVPATH\0KEY=VALUE\0...". An error wraps
// ErrMalformed and says what is wrong, quoting the part at fault.
func parse(msg []byte) (Event, error) {
	if len(msg) == 0 {
		return Event{}, fmt.Errorf("%w: empty message", ErrMalformed)
	}
	s := string(msg)
	if strings.HasPrefix(s, udevPrefix) {
		return Event{}, fmt.Errorf("%w: a message of udevd, not of the kernel", ErrMalformed)
	}
	header, rest, _ := strings.Cut(s, "\x00")
	action, devpath, ok := strings.Cut(header, "@")
	switch {
	case !ok:
		return Event{}, fmt.Errorf("%w: no \"@\" in header %s", ErrMalformed, quote(header))
	case action == "":
		return Event{}, fmt.Errorf("%w: no action in header %s", ErrMalformed, quote(header))
	case !strings.HasPrefix(devpath, "/"):
		return Event{}, fmt.Errorf("%w: device path %s does not start with \"/\"", ErrMalformed, quote(devpath))
	}
	ev := Event{Action: action, DevPath: devpath, Env: map[string]string{}}
	bad := func(format string, args ...any) (Event, error) {
		return Event{}, fmt.Errorf("%w: %s: %s", ErrMalformed, quote(header), fmt.Sprintf(format, args...))
	}
	for field := range strings.SplitSeq(rest, "\x00") {
		if field == "" {
			continue // the message ends with a NUL
		}
		k, v, ok := strings.Cut(field, "=")
		if !ok || k == "" {
			return bad("field %s is not KEY=VALUE", quote(field))
		}
		if _, dup := ev.Env[k]; dup {
			return bad("%s given twice", quote(k))
		}
		ev.Env[k] = v
	}
	if a, ok := ev.Env["ACTION"]; ok && a != action {
		return bad("ACTION=%s differs from the header", quote(a))
	}
	if d, ok := ev.Env["DEVPATH"]; ok && d != devpath {
		return bad("DEVPATH=%s differs from the header", quote(d))
	}
	sub, ok := ev.Env["SUBSYSTEM"]
	if !ok || sub == "" {
		return bad("no SUBSYSTEM")
	}
	ev.Subsystem = sub
	if seq, ok := ev.Env["SEQNUM"]; ok {
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			return bad("SEQNUM=%s is not a number", quote(seq))
		}
		ev.Seqnum = n
	}
	return ev, nil
}

// quote quotes s for an error message, cut to 80 bytes: a message is at
// most a few KiB, and one line of it says enough.
func quote(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + "..."
	}
	return strconv.Quote(s)
}

const (
	// kernelGroup is the multicast group of the kernel's own uevents.
	kernelGroup = 1
	// RecvBuffer is the receive buffer Open asks for: room for a burst
	// (a driver reload sends several events per EFA) while the reader is
	// slow. Without CAP_NET_ADMIN the kernel caps it at
	// net.core.rmem_max; what overflows is reported as ErrLost.
	RecvBuffer = 2 << 20
	// maxMessage holds any uevent: the kernel's environment buffer is 2 KiB
	// (UEVENT_BUFFER_SIZE), the header a path under /sys.
	maxMessage = 16 << 10
)

// Conn is a socket that receives the kernel's uevents.
type Conn struct {
	f      *os.File
	rc     syscall.RawConn
	buf    []byte
	closed atomic.Bool
}

// Open opens a NETLINK_KOBJECT_UEVENT socket in the caller's network
// namespace and joins the kernel's group. No capability is needed; a
// receive buffer of RecvBuffer is set with SO_RCVBUFFORCE where the
// process may (CAP_NET_ADMIN), else with SO_RCVBUF.
func Open() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("opening a uevent socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, RecvBuffer); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, RecvBuffer); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("setting the uevent socket's receive buffer: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: kernelGroup}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("joining the kernel's uevent group: %w", err)
	}
	// Non-blocking, so the file joins Go's poller: Close wakes a Receive
	// that waits.
	f := os.NewFile(uintptr(fd), "uevent")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Conn{f: f, rc: rc, buf: make([]byte, maxMessage)}, nil
}

// RecvBufferBytes is the receive buffer the kernel granted (the kernel
// doubles what is asked, for its bookkeeping).
func (c *Conn) RecvBufferBytes() (int, error) {
	var n int
	var gerr error
	err := c.rc.Control(func(fd uintptr) {
		n, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	return n, errors.Join(err, gerr)
}

// Receive waits for the next uevent of the kernel. Besides an event it
// returns ErrLost (events were lost; go on receiving), an error wrapping
// ErrMalformed (that message skipped; go on receiving), ErrClosed after
// Close, or an error of the socket. Receive is for one goroutine at a
// time; Close may be called from any.
func (c *Conn) Receive() (Event, error) {
	for {
		var n, flags int
		var from unix.Sockaddr
		var rerr error
		err := c.rc.Read(func(fd uintptr) bool {
			for {
				n, _, flags, from, rerr = unix.Recvmsg(int(fd), c.buf, nil, 0)
				if rerr != unix.EINTR {
					return rerr != unix.EAGAIN
				}
			}
		})
		switch {
		case err != nil && c.closed.Load():
			return Event{}, ErrClosed
		case err != nil:
			return Event{}, fmt.Errorf("reading uevents: %w", err)
		case rerr == unix.ENOBUFS:
			return Event{}, ErrLost
		case rerr != nil:
			return Event{}, fmt.Errorf("reading uevents: %w", rerr)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		if flags&unix.MSG_TRUNC != 0 {
			return Event{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, len(c.buf))
		}
		return parse(c.buf[:n])
	}
}

// Close closes the socket; a Receive that waits returns ErrClosed.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.f.Close()
}
