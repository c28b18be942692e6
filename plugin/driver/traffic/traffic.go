// Package traffic tells whether a prepared claim's EFAs carry RDMA
// traffic: for each allocated device of each claim (an EFA, a group of
// EFAs, a share of an EFA), when its byte counters last moved. A job whose
// libfabric or NCCL fell back to TCP runs with nothing failing; its EFAs'
// counters stand still. After IdleAfter without traffic (since the claim
// was first seen prepared, or since its last traffic) the device is idle:
// its claim's TrafficSeen condition is False (reason NoTraffic), an Event
// goes on the claim and the idle-claims metric counts it. The first
// traffic turns the condition True.
//
// A shared EFA's counters are the device's, not a claim's: traffic of any
// claim sharing it counts for all of them, so an idle claim beside a busy
// one is not seen. Its condition says so.
//
// The Tracker keeps what it has seen in a file of its own (not the
// checkpoint, which the kubelet's calls own), so a restarted plugin keeps
// when each device was first seen and last carried traffic; the counters'
// values are not kept, so the first read after a start is a baseline.
package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/atomicfile"
	"github.com/efakit/efakit/plugin/driver/claimstatus"
)

// Counters are the byte counters that move with RDMA traffic, both ways:
// sends and receives, RDMA reads and the answers to a peer's, RDMA writes
// and a peer's writes into this host's memory. rx_bytes and tx_bytes are
// left out: they count the port's packets, some of which no job sent.
var Counters = []string{"send_bytes", "recv_bytes", "rdma_read_bytes", "rdma_read_resp_bytes", "rdma_write_bytes", "rdma_write_recv_bytes"}

// TypeTrafficSeen is the condition on each allocated device of a claim.
const TypeTrafficSeen = "TrafficSeen"

// Reasons of the TrafficSeen condition.
const (
	ReasonTraffic   = "Traffic"
	ReasonNoTraffic = "NoTraffic"
	ReasonWaiting   = "NotYetJudged"
)

// Claim is a prepared claim as the Tracker sees it.
type Claim struct {
	UID, Namespace, Name string
	Devices              []Device
}

// Device is one allocated device of a claim: its EFAs' PCI addresses
// (the counters' keys) and RDMA names (for the messages).
type Device struct {
	Name      string // the allocated device, as the claim's status names it
	ShareID   string // a share of an EFA; "" for a whole one
	PCI, RDMA []string
}

// Change is a device that turned idle, or carried traffic again after
// being idle.
type Change struct {
	Claim  Claim
	Device Device
	Idle   bool
	// Since is when the device was first seen prepared or last carried
	// traffic: the start of its idle time.
	Since time.Time
	// Message says what was found and what to check.
	Message string
}

// Tracker keeps each prepared device's traffic. Safe for concurrent use.
type Tracker struct {
	idleAfter time.Duration
	path      string

	mu      sync.Mutex
	devices map[key]*device
	// last is each EFA's traffic counters at the last read, by PCI address.
	last  map[string]map[string]uint64
	saved time.Time
}

type key struct{ UID, Device, ShareID string }

// device is what is kept of one allocated device.
type device struct {
	Namespace string    `json:"namespace"`
	Claim     string    `json:"claim"`
	UID       string    `json:"uid"`
	Device    string    `json:"device"`
	ShareID   string    `json:"shareID,omitempty"`
	Seen      time.Time `json:"seen"`              // first seen prepared
	Traffic   time.Time `json:"traffic,omitzero"`  // last traffic
	Idle      bool      `json:"idle"`              // judged idle
	RDMA      []string  `json:"rdma"`              // its EFAs' RDMA names
	Shared    bool      `json:"shared,omitempty"`  // a share of an EFA
	Reported  time.Time `json:"reported,omitzero"` // when it turned idle
}

// file is the Tracker's file.
type file struct {
	Version int       `json:"version"`
	Devices []*device `json:"devices"`
}

const fileVersion = 1

// New returns a Tracker that judges a device idle after idleAfter without
// traffic (0: never; Conditions are then empty), kept in path ("" for
// none). A file that cannot be read is an error, and the Tracker starts
// empty: the devices are judged from now on.
func New(idleAfter time.Duration, path string) (*Tracker, error) {
	t := &Tracker{idleAfter: idleAfter, path: path, devices: map[key]*device{}, last: map[string]map[string]uint64{}}
	if path == "" {
		return t, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("traffic: reading %s: %w", path, err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return t, fmt.Errorf("traffic: %s: %w", path, err)
	}
	if f.Version != fileVersion {
		return t, fmt.Errorf("traffic: %s: version %d, this plugin reads %d", path, f.Version, fileVersion)
	}
	for _, d := range f.Devices {
		t.devices[key{d.UID, d.Device, d.ShareID}] = d
	}
	return t, nil
}

// IdleAfter is the time without traffic after which a device is idle.
func (t *Tracker) IdleAfter() time.Duration { return t.idleAfter }

// Observe takes the prepared claims and their EFAs' counters, read at
// now (by PCI address, as the EFA exporter reads them), and returns the
// devices that turned idle or busy again. Devices of claims no longer
// prepared are forgotten. An EFA missing from read (a hung or removed
// device) moves nothing; a counter lower than before (a driver reload)
// is a new baseline, not traffic.
func (t *Tracker) Observe(now time.Time, claims []Claim, read map[string]*efa.Counters) ([]Change, error) {
	if t.idleAfter <= 0 {
		return nil, nil
	}
	changes, data, err := t.observe(now, claims, read)
	if err == nil && data != nil && t.path != "" {
		// No fsync: the file only saves a restart from judging anew, and
		// one a crash damaged is read as none.
		err = atomicfile.Write(t.path, data, atomicfile.Options{Durability: atomicfile.SyncNone})
		if err != nil {
			err = fmt.Errorf("traffic: writing %s: %w", t.path, err)
		}
	}
	return changes, err
}

// observe is Observe under the lock; it returns the file's new content
// when it is to be written.
func (t *Tracker) observe(now time.Time, claims []Claim, read map[string]*efa.Counters) ([]Change, []byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := map[string]bool{}
	next := map[string]map[string]uint64{}
	for pci, c := range read {
		vals := trafficCounters(c)
		if vals == nil {
			continue
		}
		next[pci] = vals
		for name, v := range vals {
			if old, ok := t.last[pci][name]; ok && v > old {
				moved[pci] = true
			}
		}
	}
	t.last = next

	dirty := false
	live := map[key]bool{}
	var changes []Change
	for _, c := range claims {
		for _, d := range c.Devices {
			k := key{c.UID, d.Name, d.ShareID}
			live[k] = true
			st, ok := t.devices[k]
			if !ok {
				st = &device{Namespace: c.Namespace, Claim: c.Name, UID: c.UID, Device: d.Name, ShareID: d.ShareID, Seen: now,
					RDMA: d.RDMA, Shared: d.ShareID != ""}
				t.devices[k] = st
				dirty = true
			}
			if slices.ContainsFunc(d.PCI, func(p string) bool { return moved[p] }) {
				if st.Traffic.IsZero() || st.Idle {
					dirty = true
				}
				st.Traffic = now
				if st.Idle {
					st.Idle, st.Reported = false, time.Time{}
					changes = append(changes, Change{Claim: c, Device: d, Idle: false, Since: now,
						Message: fmt.Sprintf("RDMA traffic on %s of claim %s/%s again", rdmaList(st.RDMA), c.Namespace, c.Name)})
				}
				continue
			}
			since := st.since()
			if !st.Idle && now.Sub(since) >= t.idleAfter {
				st.Idle, st.Reported = true, now
				dirty = true
				changes = append(changes, Change{Claim: c, Device: d, Idle: true, Since: since, Message: st.idleMessage(t.idleAfter)})
			}
		}
	}
	for k := range t.devices {
		if !live[k] {
			delete(t.devices, k)
			dirty = true
		}
	}
	// The last traffic's time moves at every busy read; it is written at
	// each change of state, and otherwise once per quarter of IdleAfter,
	// so a restart finds it at most that old.
	if !dirty && now.Sub(t.saved) < t.idleAfter/4 {
		return changes, nil, nil
	}
	t.saved = now
	data, err := t.encode()
	return changes, data, err
}

// trafficCounters are an EFA's traffic counters, from its first port (the
// only one an EFA has) and the device's own; nil when it has none.
func trafficCounters(c *efa.Counters) map[string]uint64 {
	if c == nil {
		return nil
	}
	out := map[string]uint64{}
	for _, name := range Counters {
		if v, ok := c.Device[name]; ok {
			out[name] = v
		}
		for _, p := range c.Ports {
			if v, ok := p[name]; ok {
				out[name] += v
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (d *device) since() time.Time {
	if d.Traffic.After(d.Seen) {
		return d.Traffic
	}
	return d.Seen
}

func rdmaList(names []string) string {
	if len(names) == 1 {
		return "EFA " + names[0]
	}
	return "EFAs " + strings.Join(names, ", ")
}

func (d *device) idleMessage(idleAfter time.Duration) string {
	what := fmt.Sprintf("no RDMA traffic on %s of claim %s/%s", rdmaList(d.RDMA), d.Namespace, d.Claim)
	if d.Traffic.IsZero() {
		what += fmt.Sprintf(" in the %s since it was prepared (%s)", idleAfter, d.Seen.UTC().Format(time.RFC3339))
	} else {
		what += fmt.Sprintf(" since %s, over %s", d.Traffic.UTC().Format(time.RFC3339), idleAfter)
	}
	msg := what + ": if a job runs, its libfabric or NCCL may have fallen back to TCP sockets; run efakit doctor in the pod (its fallback check says why)"
	if d.Shared {
		msg += "; a shared EFA's counters count every claim sharing it"
	}
	return msg
}

// Condition is the TrafficSeen condition of a claim's allocated device;
// false when the Tracker judges nothing (IdleAfter 0) or has not seen it.
func (t *Tracker) Condition(uid, dev, shareID string, now time.Time) (claimstatus.Condition, bool) {
	if t.idleAfter <= 0 {
		return claimstatus.Condition{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.devices[key{uid, dev, shareID}]
	if !ok {
		return claimstatus.Condition{}, false
	}
	shared := ""
	if d.Shared {
		shared = " (a shared EFA: any claim sharing it counts)"
	}
	switch {
	case d.Idle:
		return claimstatus.Condition{Type: TypeTrafficSeen, Status: metav1.ConditionFalse, Reason: ReasonNoTraffic, Message: d.idleMessage(t.idleAfter)}, true
	case !d.Traffic.IsZero():
		// The message does not carry the time: it would change the
		// status at every busy scan.
		return claimstatus.Condition{Type: TypeTrafficSeen, Status: metav1.ConditionTrue, Reason: ReasonTraffic,
			Message: fmt.Sprintf("RDMA traffic on %s within the last %s%s", rdmaList(d.RDMA), t.idleAfter, shared)}, true
	}
	return claimstatus.Condition{Type: TypeTrafficSeen, Status: metav1.ConditionUnknown, Reason: ReasonWaiting,
		Message: fmt.Sprintf("no RDMA traffic on %s yet; judged idle %s after it was prepared (%s)%s", rdmaList(d.RDMA), t.idleAfter, d.Seen.UTC().Format(time.RFC3339), shared)}, true
}

// IdleClaims counts the claims with an idle device.
func (t *Tracker) IdleClaims() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	uids := map[string]bool{}
	for _, d := range t.devices {
		if d.Idle {
			uids[d.UID] = true
		}
	}
	return len(uids)
}

// encode is the Tracker's file. Called with t.mu.
func (t *Tracker) encode() ([]byte, error) {
	f := file{Version: fileVersion}
	for _, d := range t.devices {
		f.Devices = append(f.Devices, d)
	}
	sort.Slice(f.Devices, func(i, j int) bool {
		a, b := f.Devices[i], f.Devices[j]
		return a.UID+"/"+a.Device+"/"+a.ShareID < b.UID+"/"+b.Device+"/"+b.ShareID
	})
	return json.Marshal(f)
}
