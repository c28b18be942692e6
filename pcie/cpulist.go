package pcie

import (
	"fmt"
	"strconv"
	"strings"
)

// CPUList is a sorted set of CPU numbers, as the kernel prints in
// local_cpulist and node/cpulist ("0-47,96-143").
type CPUList []int

// maxCPU bounds a parsed list: the kernel's NR_CPUS is at most 8192.
const maxCPU = 8191

// ParseCPUList parses the kernel's list format. An empty string is an empty
// list.
func ParseCPUList(s string) (CPUList, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return CPUList{}, nil
	}
	var out CPUList
	last := -1
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("cpu list %q: range %s runs backwards", s, part)
			}
		}
		if a <= last {
			return nil, fmt.Errorf("cpu list %q: %s is not in ascending order", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
		last = b
	}
	return out, nil
}

func parseCPU(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	n, _ := strconv.Atoi(s)
	if n > maxCPU {
		return 0, fmt.Errorf("cpu %d is over %d", n, maxCPU)
	}
	return n, nil
}

// String prints the list in the kernel's format.
func (l CPUList) String() string {
	var b strings.Builder
	for i := 0; i < len(l); {
		j := i
		for j+1 < len(l) && l[j+1] == l[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", l[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", l[i], l[j])
		}
		i = j + 1
	}
	return b.String()
}

// MarshalText prints the kernel's format.
func (l CPUList) MarshalText() ([]byte, error) { return []byte(l.String()), nil }
