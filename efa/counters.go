package efa

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/internal/names"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/sysfs"
)

// Counters are the hardware counters of an EFA at one moment: the device's
// (infiniband/<name>/hw_counters) and each port's
// (infiniband/<name>/ports/<n>/hw_counters), by file name. A counter whose
// file cannot be read or parsed, or whose name cannot be printed, is not in
// the map (unknown, never 0) and has an error.
type Counters struct {
	Device map[string]uint64
	Ports  map[int]map[string]uint64
}

// ReadCounters reads the EFA's counters now. Counters are not read during
// discovery: they change all the time and cost one file each. Pass the root
// the device was discovered in.
func (d *Device) ReadCounters(fsys fs.FS) (*Counters, error) {
	r := sysread.New(fsys)
	c := &Counters{Ports: make(map[int]map[string]uint64)}
	var errs []error
	var err error
	c.Device, err = readCounterDir(r, d.Name, d.IBPath+"/hw_counters")
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range d.Ports {
		m, err := readCounterDir(r, d.Name, fmt.Sprintf("%s/ports/%d/hw_counters", d.IBPath, p.Number))
		if err != nil {
			errs = append(errs, err)
		}
		if m != nil {
			c.Ports[p.Number] = m
		}
	}
	return c, errors.Join(errs...)
}

func readCounterDir(r *sysread.Reader, dev, dir string) (map[string]uint64, error) {
	ents, err := r.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // older drivers have no counters
		}
		return nil, &sysfs.Error{Subsystem: "efa", Device: dev, File: dir, Err: fserr.Cause(err)}
	}
	out := make(map[string]uint64, len(ents))
	var errs []error
	for _, e := range ents {
		if e.IsDir() || e.Name() == notACounter {
			continue
		}
		if err := names.CheckName(e.Name()); err != nil {
			errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: dev, File: dir, Err: fmt.Errorf("counter left out: %w", err)})
			continue
		}
		f := dir + "/" + e.Name()
		s, err := r.ReadString(f)
		if err == nil {
			var v uint64
			if v, err = parseCounter(s); err == nil {
				out[e.Name()] = v
				continue
			}
		}
		errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: dev, File: f, Err: fserr.Cause(err)})
	}
	return out, errors.Join(errs...)
}

// parseCounter parses a decimal counter value.
func parseCounter(s string) (uint64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a counter value", clip(s))
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a counter value: %w", clip(s), err)
	}
	return v, nil
}

// PortLink is a port's state and link rate as read at one moment.
type PortLink struct {
	State    string  // "ACTIVE", "DOWN", ...; "" when unknown
	RateGbps float64 // 0 when unknown
	// StateOK and RateOK say the value was read.
	StateOK, RateOK bool
}

// ReadPortLink reads a port's state and rate now (ports/<n>/state and
// rate): a link may go down while the device is watched, after discovery
// read them. A file that is missing or damaged leaves its value unknown,
// with an error naming the device and the file. Pass the root the device
// was discovered in.
func (d *Device) ReadPortLink(fsys fs.FS, port int) (PortLink, error) {
	r := sysread.New(fsys)
	dir := fmt.Sprintf("%s/ports/%d", d.IBPath, port)
	var l PortLink
	var errs []error
	s, err := r.ReadString(dir + "/state")
	if err == nil {
		l.State, err = parseEnumAttr(s)
	}
	if err != nil {
		l.State = ""
		errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: d.Name, File: dir + "/state", Err: fserr.Cause(err)})
	} else {
		l.StateOK = true
	}
	s, err = r.ReadString(dir + "/rate")
	if err == nil {
		l.RateGbps, err = parseRate(s)
	}
	if err != nil {
		l.RateGbps = 0
		errs = append(errs, &sysfs.Error{Subsystem: "efa", Device: d.Name, File: dir + "/rate", Err: fserr.Cause(err)})
	} else {
		l.RateOK = true
	}
	return l, errors.Join(errs...)
}
