package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT
// is not set. On a p5 (32 EFAs) the plugin's live heap is 4-5 MB and the
// runtime's own memory 8-9 MB more. In two minutes with the default
// intervals, without a limit (GOGC=100) the heap grew to twice the live
// heap between collections and RssAnon was 13.7 MB; with 16 MiB 11.7 MB,
// for 8 collections instead of 5 and 0.30 s of CPU instead of 0.26 s;
// 12 MiB gave 9.6 MB but 64 collections and 0.65 s, the heap's goal at the
// live heap. Near the limit the collector runs more often; it never fails
// an allocation.
const defaultMemoryLimit = 16 << 20

// limitMemory sets the default soft memory limit unless GOMEMLIMIT set one,
// and returns the limit in force.
func limitMemory(getenv func(string) string) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1) // -1 reads it
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
	return defaultMemoryLimit
}

// mapping is one line of /proc/<pid>/maps (proc(5)).
type mapping struct {
	start, end uintptr
	perms      string // rwxp
	path       string // "" for an anonymous mapping
}

// parseMaps reads /proc/<pid>/maps: "start-end perms offset dev inode
// [path]", the path being the rest of the line (it may hold spaces, and
// ends in " (deleted)" when the file was replaced).
func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		// Fields are separated by spaces; the path is the rest of the
		// line, spaces and all.
		var fields [5]string
		rest := line
		for i := range fields {
			rest = strings.TrimLeft(rest, " \t")
			j := strings.IndexAny(rest, " \t")
			if j < 0 {
				j = len(rest)
			}
			fields[i], rest = rest[:j], rest[j:]
		}
		if fields[4] == "" {
			return nil, fmt.Errorf("line %d: %q: want at least 5 fields", n, line)
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start || uint64(uintptr(end)) != end {
			return nil, fmt.Errorf("line %d: %q is not an address range", n, fields[0])
		}
		if len(fields[1]) != 4 {
			return nil, fmt.Errorf("line %d: %q is not a permission set", n, fields[1])
		}
		out = append(out, mapping{start: uintptr(start), end: uintptr(end), perms: fields[1],
			path: strings.TrimLeft(rest, " \t")})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// imageMappings are the read-only mappings of the file that holds pc (the
// executable, given a pc of its code): its code, read-only data and
// function tables. Writable mappings (data, bss) are never included: only
// file pages the kernel can read again are given back.
func imageMappings(maps []mapping, pc uintptr) []mapping {
	path := ""
	for _, m := range maps {
		if m.start <= pc && pc < m.end {
			path = m.path
		}
	}
	if path == "" || path[0] == '[' {
		return nil
	}
	var out []mapping
	for _, m := range maps {
		if m.path == path && m.perms[1] != 'w' {
			out = append(out, m)
		}
	}
	return out
}

// releaseStartupPages gives the kernel back the pages of the executable
// that start-up touched and the plugin does not use again: Go runs every
// package's init (client-go registers every API type of every group)
// before main, and those code and type pages would stay mapped for the
// plugin's life. The kernel reads again whatever is used later. It returns
// how many bytes of mappings it advised.
func releaseStartupPages(mapsPath string, pc uintptr) (int, error) {
	f, err := os.Open(mapsPath)
	if err != nil {
		return 0, err
	}
	maps, err := parseMaps(f)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", mapsPath, err)
	}
	ms := imageMappings(maps, pc)
	if len(ms) == 0 {
		return 0, fmt.Errorf("%s: no file mapping holds the plugin's code", mapsPath)
	}
	n := 0
	for _, m := range ms {
		if err := pageOut(m.start, m.end-m.start); err != nil {
			return n, fmt.Errorf("%s (%x-%x): %w", m.path, m.start, m.end, err)
		}
		n += int(m.end - m.start)
	}
	return n, nil
}
