package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fixMemlock raises the limit where containers get it from: the runtime.
const fixMemlock = "raise the container runtime's limit on the node: a systemd drop-in " +
	"/etc/systemd/system/containerd.service.d/memlock.conf with [Service] and LimitMEMLOCK=infinity, " +
	"then systemctl daemon-reload && systemctl restart containerd (containers inherit the runtime's limit)"

// runtimeNames are the container runtimes whose limits containers inherit,
// by their comm, in the order they are looked for.
func runtimeNames() []string { return []string{"containerd", "crio"} }

// runtimeLimit is a container runtime process's RLIMIT_MEMLOCK.
type runtimeLimit struct {
	Name string
	PID  int
	Soft uint64 // the soft limit, which applies
}

// memlock checks RLIMIT_MEMLOCK: libfabric pins memory and needs a high
// limit, which CDI cannot set. In a pod this process's limit is the
// container's. On a node, containers inherit the runtime's, so the
// runtime's limit from /proc decides when a runtime process is there.
func (f *facts) memlock() Check {
	own, ownErr := f.o.Memlock()
	ownText := "this process: " + formatLimit(own.Cur)
	if ownErr != nil {
		ownText = fmt.Sprintf("this process: %v", ownErr)
	}
	var note string
	if f.o.Place == OnNode {
		rt, err := findRuntimeLimit(f.o.ProcDir)
		switch {
		case err != nil:
			note = fmt.Sprintf(" (the runtime's limit is unknown: %v)", err)
		case rt == nil:
			note = fmt.Sprintf(" (no %s process under %s)", strings.Join(runtimeNames(), " or "), f.o.ProcDir)
		default:
			msg := fmt.Sprintf("RLIMIT_MEMLOCK of %s (pid %d), which containers inherit: %s", rt.Name, rt.PID, formatLimit(rt.Soft))
			if rt.Soft == unix.RLIM_INFINITY {
				return Check{ID: CheckMemlock, Status: Pass, Message: msg + "; " + ownText}
			}
			return Check{ID: CheckMemlock, Status: Warn, Message: msg + ", and libfabric pins memory; " + ownText, Fix: fixMemlock}
		}
	}
	switch {
	case ownErr != nil:
		return Check{ID: CheckMemlock, Status: Skip, Message: "RLIMIT_MEMLOCK unknown: " + ownText + note}
	case own.Cur == unix.RLIM_INFINITY:
		return Check{ID: CheckMemlock, Status: Pass, Message: "RLIMIT_MEMLOCK of " + ownText + note}
	}
	return Check{ID: CheckMemlock, Status: Warn, Message: "RLIMIT_MEMLOCK of " + ownText + ", and libfabric pins memory" + note, Fix: fixMemlock}
}

// formatLimit prints a limit in bytes and KiB, or "unlimited".
func formatLimit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d bytes (%d KiB)", v, v/1024)
}

// findRuntimeLimit finds a container runtime process under procDir by its
// <pid>/comm and reads its limit from <pid>/limits; nil when none runs.
// Processes that end or hide while being read are passed over.
func findRuntimeLimit(procDir string) (*runtimeLimit, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err // *fs.PathError names the directory
	}
	found := make(map[string]int) // runtime -> lowest pid
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procDir, e.Name(), "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		for _, rt := range runtimeNames() {
			if name == rt && (found[rt] == 0 || pid < found[rt]) {
				found[rt] = pid
			}
		}
	}
	for _, rt := range runtimeNames() {
		pid := found[rt]
		if pid == 0 {
			continue
		}
		path := filepath.Join(procDir, strconv.Itoa(pid), "limits")
		fh, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		soft, _, err := parseMemlockLimit(io.LimitReader(fh, 64<<10))
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &runtimeLimit{Name: rt, PID: pid, Soft: soft}, nil
	}
	return nil, nil
}

// parseMemlockLimit reads the "Max locked memory" line of a
// /proc/<pid>/limits file: soft and hard limit in bytes, "unlimited" as
// unix.RLIM_INFINITY.
func parseMemlockLimit(r io.Reader) (soft, hard uint64, err error) {
	const key = "Max locked memory"
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), key)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			return 0, 0, fmt.Errorf("%q: want soft and hard limit", clip(sc.Text()))
		}
		if soft, err = parseLimitValue(fields[0]); err == nil {
			hard, err = parseLimitValue(fields[1])
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%q: %w", clip(sc.Text()), err)
		}
		return soft, hard, nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	return 0, 0, errors.New("no \"Max locked memory\" line")
}

// parseLimitValue parses one limit of /proc/<pid>/limits.
func parseLimitValue(s string) (uint64, error) {
	if s == "unlimited" {
		return unix.RLIM_INFINITY, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of bytes or \"unlimited\"", clip(s))
	}
	return v, nil
}

// clip shortens outside input quoted in an error.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
