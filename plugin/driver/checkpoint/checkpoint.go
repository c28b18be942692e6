// Package checkpoint is the kubelet plugin's record of prepared claims, kept
// in its data directory (/var/lib/kubelet/plugins/<driver>/checkpoint.json)
// so that a restarted plugin knows what it prepared: Unprepare after a
// restart finds the claim's devices, and Prepare of a claim already prepared
// returns the same CDI devices.
//
// The file is written atomically and carries a checksum, and a damaged file
// never stops the plugin: Load moves it aside and starts empty, since the
// kubelet prepares again any claim the plugin does not know.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/efakit/efakit/internal/atomicfile"
)

// Version is the latest version of the file format, the one Save writes
// when the state needs it (formatVersion: else 2). Load reads it and
// every earlier version (version 1 lacks the fields marked "since 2",
// versions 1 and 2 those marked "since 3", which read as empty). A later
// version, written by a newer efakit before a rollback, is refused with
// ErrNewerVersion and left in place: discarding it would lose the record
// of what is prepared.
const Version = 3

// FileName is the checkpoint's name in the data directory.
const FileName = "checkpoint.json"

// CorruptSuffix is appended to FileName to make the name a damaged
// checkpoint is moved to, "checkpoint.json.corrupt". There is one such
// file, the last damaged checkpoint: its disk use is bounded, and the next
// Save writes a good checkpoint, so a damaged file is moved at most once.
const CorruptSuffix = ".corrupt"

// MaxSize bounds the checkpoint file Load reads. A node holds at most a
// few hundred claims of a few kilobytes each; anything larger is damage,
// not something to read into memory.
const MaxSize = 16 << 20

// ErrNewerVersion is wrapped by Load's error when the checkpoint has a
// format version newer than Version. The file is not touched.
var ErrNewerVersion = errors.New("checkpoint written by a newer version")

// ErrCorrupt is wrapped by Load's error when the checkpoint was damaged
// (not JSON, truncated, checksum mismatch, unknown version, inconsistent
// content) and has been moved aside.
var ErrCorrupt = errors.New("corrupt checkpoint")

// PreparedDevice is one device of a prepared claim.
type PreparedDevice struct {
	Request string `json:"request"` // the claim's request the device was allocated for
	Pool    string `json:"pool"`
	// Device is the published device name, efa-0000-4f-00-0.
	Device     string `json:"device"`
	RDMAName   string `json:"rdmaName"`   // rdmap79s0
	Uverbs     string `json:"uverbs"`     // uverbs3
	PCIAddress string `json:"pciAddress"` // 0000:4f:00.0
	Major      uint32 `json:"major"`      // of the uverbs character device
	Minor      uint32 `json:"minor"`
	// Group is the allocated group device this EFA is a member of
	// (efa-group-pci0000-44); "" for an EFA allocated on its own.
	Group string `json:"group,omitempty"`
	// Stale are device numbers ("231:192") that the claim's specs gave
	// containers before the kernel numbered the EFA's uverbs device anew
	// (an efa or ib_uverbs module reload): containers started then may
	// still hold them, so no other claim gets them. Since 2.
	Stale []string `json:"stale,omitempty"`
	// ShareID is the allocation's share of an EFA shared by capacity
	// (several claims hold it, each with a share of its own); "" for an
	// EFA the claim holds alone. Since 3.
	ShareID string `json:"shareID,omitempty"`
	// Shares is how many of the EFA's shares the allocation consumes
	// (its consumedCapacity); 0 when not shared. Since 3.
	Shares int64 `json:"shares,omitempty"`
}

// Claim is one prepared claim.
type Claim struct {
	UID       string           `json:"uid"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
	// CDIDeviceIDs maps a request to the fully qualified CDI device ID of
	// all its EFAs, for a claim prepared by an efakit that gave the
	// kubelet one CDI device per request: its spec keeps that device, which
	// its containers start with. Empty for a claim prepared since, whose
	// IDs are one per allocated device, "<uid>-<request>_<device>" (see
	// package cdi).
	CDIDeviceIDs map[string]string `json:"cdiDeviceIDs"`
	// Env maps a request to the environment variables its CDI device sets
	// ("NAME=value"); requests that set none are absent. Since 2.
	Env map[string][]string `json:"env,omitempty"`
	// ExtendedClasses is set for the claim the scheduler made for a pod's
	// extended resources (vpc.amazonaws.com/efa in a container's
	// resources): each of its requests with this node's EFAs, and the
	// DeviceClass that request asks. Each container of the pod gets one
	// request of a class (its own), never the others'. Since 3.
	ExtendedClasses map[string]string `json:"extendedClasses,omitempty"`
}

// Allocated is one device the scheduler allocated a prepared claim, as the
// kubelet knows it: an EFA, a group device once (its EFAs the members),
// or an EFA shared by capacity once per share. The CDI device, the
// kubelet's answer, the claim's status.devices entry and the traffic
// judgement are each one per allocated device.
type Allocated struct {
	// Name is the published device: the EFA, or the group.
	Name string
	// ShareID is the allocation's share of an EFA shared by capacity ("":
	// none).
	ShareID string
	// Request is the request of the first of its EFAs.
	Request string
	// EFAs are the claim's records of its EFAs, in record order.
	EFAs []PreparedDevice
}

// Allocated groups the claim's EFAs by allocated device, in record order.
func (c Claim) Allocated() []Allocated {
	var out []Allocated
	index := map[[2]string]int{}
	for _, d := range c.Devices {
		name := d.Device
		if d.Group != "" {
			name = d.Group
		}
		k := [2]string{name, d.ShareID}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, Allocated{Name: name, ShareID: d.ShareID, Request: d.Request})
		}
		out[i].EFAs = append(out[i].EFAs, d)
	}
	return out
}

// State is the checkpoint's content.
type State struct {
	// Version is the format version; Save writes Version whatever it holds.
	Version int `json:"version"`
	// BootID is the kernel boot ID the claims were prepared under.
	BootID string `json:"bootID"`
	// Claims are the prepared claims by UID.
	Claims map[string]Claim `json:"claims"`

	// Dropped are the claims, by UID, of a checkpoint written before the
	// node rebooted, which Load left out of Claims: the kubelet prepares
	// them again. The plugin may want to log them and remove their CDI
	// specs if its CDI directory outlives a reboot. Never saved.
	Dropped []Claim `json:"-"`
}

// file is the checkpoint file: the state and a checksum of it.
type file struct {
	Version int `json:"version"`
	// Checksum is the hex SHA-256 of the canonical JSON of Data:
	// json.Marshal of the decoded State, so that reformatting the file
	// (jq) keeps it valid but any change of content does not.
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Store reads and writes the checkpoint of one data directory. It is safe
// for concurrent use: Load and Save are serialized, so the file is always
// one whole State. The State passed to Save must not change during the call.
type Store struct {
	// Sync, when set, is called instead of (*os.File).Sync for each fsync
	// of Save: tests count them through it. Set before first use.
	Sync func(*os.File) error
	// Open, when set, is called instead of os.Open to read the
	// checkpoint: tests count the reads through it. Set before first use.
	Open func(name string) (*os.File, error)

	mu   sync.Mutex
	dir  string
	path string
	last known
}

// known is the checkpoint as this Store last read or wrote it: the State,
// the boot ID it was loaded under, and the file it came from, held open so
// that no other file can take its inode number (a new file made by Save's
// rename, here or in another process, is always another inode than it);
// file is nil when there was no file. A zero known (st nil) is nothing.
type known struct {
	st     *State
	bootID string
	file   *os.File
	info   fs.FileInfo
}

// NewStore returns the Store of the checkpoint in dir, dir/checkpoint.json.
// It touches no file.
func NewStore(dir string) *Store {
	return &Store{dir: dir, path: filepath.Join(dir, FileName)}
}

// Path is the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// remember records st as what the file holds; f (nil for no file) is
// kept open. Called with s.mu held.
func (s *Store) remember(st *State, bootID string, f *os.File) {
	s.forget()
	if f == nil {
		s.last = known{st: st, bootID: bootID}
		return
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return
	}
	s.last = known{st: st, bootID: bootID, file: f, info: info}
}

// forget drops what remember recorded. Called with s.mu held.
func (s *Store) forget() {
	if s.last.file != nil {
		_ = s.last.file.Close()
	}
	s.last = known{}
}

// unchanged tells whether the file is still the one remembered: the same
// inode (no rename replaced it) with the same size and modification time
// (nobody wrote into it), or still no file. Called with s.mu held.
func (s *Store) unchanged() bool {
	if s.last.st == nil {
		return false
	}
	info, err := os.Lstat(s.path)
	if s.last.file == nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	return err == nil && os.SameFile(info, s.last.info) && info.Size() == s.last.info.Size() && info.ModTime().Equal(s.last.info.ModTime())
}

// Reload is Load that reads nothing when nothing changed: when have is the
// State this Store last returned from Load or Reload, or was given to
// Save, for the same boot ID, and the file is the one it read or wrote
// then (no other process, such as the other plugin pod of a rolling
// update, replaced it), Reload returns have after one stat. The caller
// must not have changed have since; a changed state is a new State
// (cloned), passed to Save.
func (s *Store) Reload(bootID string, have *State) (*State, error) {
	s.mu.Lock()
	if have != nil && have == s.last.st && bootID == s.last.bootID && s.unchanged() {
		s.mu.Unlock()
		return have, nil
	}
	s.mu.Unlock()
	return s.Load(bootID)
}

// Load reads the checkpoint.
//
// A missing file gives an empty State and no error. If the checkpoint was
// written under another boot ID than bootID (the node rebooted), its claims
// are left out and listed in Dropped, since the kubelet prepares again after
// a reboot. The returned State always has Version, bootID and a non-nil
// Claims, ready for Save; Load writes nothing itself.
//
// A damaged file must not make the plugin crash-loop: Load moves it to
// FileName+CorruptSuffix and returns an empty State together with an error
// that wraps ErrCorrupt and says what was wrong and where the file went.
// The caller logs it and goes on. Any other error (the file cannot be
// read) comes with a nil State.
func (s *Store) Load(bootID string) (*State, error) {
	if bootID == "" {
		return nil, errors.New("checkpoint: load with an empty boot ID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget()

	empty := &State{Version: Version, BootID: bootID, Claims: map[string]Claim{}}
	f, data, err := s.readBounded()
	if errors.Is(err, fs.ErrNotExist) {
		s.remember(empty, bootID, nil)
		return empty, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	if v, ok := newerVersion(data); ok {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s has format version %d, this efakit reads up to %d; run the newer efakit again, or move the file away to forget every prepared claim", ErrNewerVersion, s.path, v, Version)
	}
	st, err := decode(data)
	if err != nil {
		_ = f.Close()
		aside := s.path + CorruptSuffix
		if rerr := os.Rename(s.path, aside); rerr != nil {
			return empty, fmt.Errorf("%w %s: %w; moving it aside: %w", ErrCorrupt, s.path, err, rerr)
		}
		s.remember(empty, bootID, nil)
		return empty, fmt.Errorf("%w %s: %w; moved to %s", ErrCorrupt, s.path, err, aside)
	}
	if st.BootID != bootID {
		for _, uid := range sortedKeys(st.Claims) {
			empty.Dropped = append(empty.Dropped, st.Claims[uid])
		}
		s.remember(empty, bootID, f)
		return empty, nil
	}
	s.remember(st, bootID, f)
	return st, nil
}

// Save writes st as the checkpoint, replacing the previous one atomically:
// a temporary file in the data directory, written, synced, and renamed over
// the checkpoint, so every process sees the old checkpoint or the new one,
// whole, and so does the next boot after a crash. The file records Version
// whatever st.Version holds; st must have a boot ID and each claim under
// its UID. Save does not change st, and remembers it for Reload.
// Concurrent Saves are written in the order they take the Store's lock, so
// a caller that saves under its own lock never sees an older state
// overwrite a newer one.
//
// One fsync, the file's, before the rename. A plugin that crashes or is
// killed loses nothing without any: the kernel's page cache outlives the
// process. What a power loss or kernel crash would lose, the next boot
// discards anyway, since claims of another boot ID are dropped; the fsync
// only keeps that boot from finding a torn file where the rename was kept
// and the data was not, which Load would have to report as corrupt and set
// aside. The directory is not synced: a lost rename leaves the previous
// checkpoint, whole, of the same old boot, and a temporary file that the
// plugin's start removes.
func (s *Store) Save(st *State) error {
	if st == nil {
		return fmt.Errorf("checkpoint %s: save of a nil state", s.path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	c := *st
	c.Version = st.formatVersion()
	if err := c.check(); err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	data, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	out, err := json.MarshalIndent(file{Version: c.Version, Checksum: checksum(data), Data: data}, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	out = append(out, '\n')
	// Whatever happens, the file may have changed: read it again next time
	// unless it is remembered anew below.
	s.forget()
	// 0600 in a 0700 directory: the checkpoint names the node's claims;
	// only the plugin reads it.
	f, err := atomicfile.WriteOpen(s.path, out, atomicfile.Options{Perm: 0o600, DirPerm: 0o700, Durability: atomicfile.SyncFile, Sync: s.Sync})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	s.remember(st, st.BootID, f)
	return nil
}

// formatVersion is the oldest format that holds the state: 3 where a
// field of version 3 is set (a share, an extended-resource claim's
// classes), else 2. An efakit of the version before (which reads 1 and 2,
// and refuses a later one rather than forget what is prepared) can then
// take over a node that used nothing of version 3: a rollback stays
// possible until the node uses what only this version knows.
func (st *State) formatVersion() int {
	for _, c := range st.Claims {
		if len(c.ExtendedClasses) > 0 {
			return 3
		}
		for _, d := range c.Devices {
			if d.ShareID != "" || d.Shares != 0 {
				return 3
			}
		}
	}
	return 2
}

// bootIDFile is the kernel's boot ID under the proc root.
const bootIDFile = "sys/kernel/random/boot_id"
