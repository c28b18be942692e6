package claims

// What a claim asks of this node and who holds it: the EFAs a claim's
// allocation gives (allocated), the prepared claims holding each EFA and
// device number (held), the refusal of a claim that another holds (take),
// and what a prepare reads before it takes the lock to decide that (the
// API server on a holder whose pod was deleted at once, the kubelet's
// pods: callReads).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/efa"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/claimenv"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/resources"
)

// wanted is one EFA a claim's allocation gives: its request, for a member
// of an allocated group device the group, and for an EFA shared by
// capacity the allocation's share and the shares it consumes.
type wanted struct {
	Request, Device, Group string
	ShareID                string
	Shares                 int64
}

// allocated lists the EFAs of this node that the claim's allocation holds,
// group devices expanded into their members, in allocation order.
func (s *State) allocated(snap *inventory.Snapshot, c *resourceapi.ResourceClaim) ([]wanted, error) {
	if c.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	var out []wanted
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != s.node.Driver {
			continue
		}
		if r.Pool != s.node.Name {
			return nil, fmt.Errorf("device %s is in pool %s, this node's pool is %s", r.Device, r.Pool, s.node.Name)
		}
		if members, ok := snap.Groups[r.Device]; ok {
			for _, m := range members {
				out = append(out, wanted{Request: r.Request, Device: m, Group: r.Device})
			}
			continue
		}
		w := wanted{Request: r.Request, Device: r.Device}
		if r.ShareID != nil {
			w.ShareID = string(*r.ShareID)
			if q, ok := r.ConsumedCapacity[resources.CapacityShares]; ok {
				w.Shares = q.Value()
			}
		}
		out = append(out, w)
	}
	return out, nil
}

func describe(ws []wanted) string {
	if len(ws) == 0 {
		return "no EFA of this node"
	}
	var s []string
	for _, w := range ws {
		d := w.Request + ":" + w.Device
		if w.ShareID != "" {
			d += fmt.Sprintf(" (share %s, %d shares)", w.ShareID, w.Shares)
		}
		s = append(s, d)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// take checks that claim uid may hold the EFA at pci, which sysfs now
// numbers cur, as w wants it, and records it in held. This is the last
// line of defense against two workloads on one EFA: the EFA itself, and
// the character device a container would open (after a module reload the
// same number may name another EFA). Shares of an EFA shared by capacity
// hold it together; an EFA held alone, or wanted alone, is never given to
// two claims.
func (s *State) take(held map[string][]holder, uid string, w wanted, pci string, cur efa.Current, rd *callReads) error {
	num := devNumber(cur.Verbs.Major, cur.Verbs.Minor)
	shared := w.ShareID != ""
	if other, ok := blocking(held["pci:"+pci], shared, pci, rd.released); ok {
		how := ""
		if shared {
			how = " alone: it cannot be shared"
		} else if s.holdsShare(other, pci) {
			how = " as a share: a claim that holds it alone must wait until every share is unprepared"
		}
		return fmt.Errorf("device %s is already prepared for claim %s%s", w.Device, s.describeClaim(other, rd), how)
	}
	if other, ok := blocking(held["dev:"+num], shared, pci, rd.released); ok {
		return fmt.Errorf("device %s is %s (%s) now, a device number that containers of claim %s were given (the uverbs devices were numbered anew, an efa or ib_uverbs module reload): refused until that claim is unprepared", w.Device, cur.Verbs.Name, num, s.describeClaim(other, rd))
	}
	me := holder{uid: uid, shared: shared, pci: pci}
	held["pci:"+pci] = append(held["pci:"+pci], me)
	held["dev:"+num] = append(held["dev:"+num], me)
	return nil
}

// describeClaim names a prepared claim for a refusal: namespace/name, its
// UID, and the pods that use it where the kubelet said (the call's reads).
func (s *State) describeClaim(uid string, rd *callReads) string {
	c, ok := s.cur.Claims[uid]
	if !ok {
		return uid
	}
	return c.Namespace + "/" + c.Name + " (" + uid + ")" + rd.pods.Users(c.Namespace, c.Name)
}

// holder is a prepared claim that holds an EFA or a device number: as a
// share (the EFA is shared by capacity, so other shares may hold it too)
// or alone.
type holder struct {
	uid    string
	shared bool
	pci    string // the EFA's PCI address
}

// held maps what prepared claims hold to the claims holding it, leaving
// out the claim except: "pci:<address>" for each EFA and
// "dev:<major>:<minor>" for each device number its containers may hold,
// stale ones included.
func (s *State) held(except string) map[string][]holder {
	out := map[string][]holder{}
	for uid, c := range s.cur.Claims {
		if uid == except {
			continue
		}
		for _, d := range c.Devices {
			h := holder{uid: uid, shared: d.ShareID != "", pci: d.PCIAddress}
			for _, key := range append([]string{"pci:" + d.PCIAddress, "dev:" + devNumber(d.Major, d.Minor)}, prefixed("dev:", d.Stale)...) {
				if !slices.Contains(out[key], h) {
					out[key] = append(out[key], h)
				}
			}
		}
	}
	return out
}

// holdsShare tells whether the prepared claim uid holds the EFA at pci as
// a share.
func (s *State) holdsShare(uid, pci string) bool {
	for _, d := range s.cur.Claims[uid].Devices {
		if d.PCIAddress == pci && d.ShareID != "" {
			return true
		}
	}
	return false
}

func prefixed(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}

// blocking returns a holder that keeps a claim from what it holds (the EFA
// at pci, or its device number): any holder where the claim wants the EFA
// alone, a holder that holds it alone where the claim wants a share.
// Shares of one EFA never block each other; a share of another EFA whose
// stale number this is does. released are the holders the API says no
// longer hold their EFAs (see readClaim); a holder not in it holds them.
func blocking(hs []holder, shared bool, pci string, released map[string]bool) (string, bool) {
	for _, h := range hs {
		if released[h.uid] || coShares(h, shared, pci) {
			continue
		}
		return h.uid, true
	}
	return "", false
}

// coShares tells whether h and a claim that wants the EFA at pci (as a
// share when shared) would both hold shares of that EFA.
func coShares(h holder, shared bool, pci string) bool {
	return shared && h.shared && h.pci == pci
}

// readClaim reads a prepared claim in the API and tells whether, though
// still prepared here, it no longer holds its EFAs there: the claim is gone (or is another claim of the
// same name), or is no longer allocated any of the devices it was prepared
// with. That happens when its pod was deleted without waiting for the
// kubelet (grace period 0, or --force): the claim controller frees the
// claim at once, the scheduler gives the EFAs to the next pod, and the
// kubelet may prepare that pod's claim before it unprepares the old one.
// Kubernetes treats such EFAs as free, so efakit does too, and says so;
// the old claim's record and spec stay until the kubelet unprepares it.
// Without an API client, or when the API cannot tell, the claim holds its
// EFAs (the prepare is refused, and the kubelet retries). It runs before
// the call takes the claim state's lock (callReads).
func (s *State) readClaim(ctx context.Context, prev checkpoint.Claim) bool {
	if s.deps.Kube == nil {
		return false
	}
	uid := prev.UID
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cur, err := s.deps.Kube.ResourceV1().ResourceClaims(prev.Namespace).Get(ctx, prev.Name, metav1.GetOptions{})
	var why string
	switch {
	case apierrors.IsNotFound(err):
		why = "the claim was deleted"
	case err != nil:
		klog.FromContext(ctx).Error(err, "Reading a prepared claim failed", "then", "it holds its EFAs until the kubelet unprepares it", "claim", klog.KRef(prev.Namespace, prev.Name))
	case string(cur.UID) != uid:
		why = "the claim was deleted and another made under its name"
	case cur.Status.Allocation == nil:
		why = "the claim was deallocated"
	default:
		holds := map[string]bool{}
		for _, d := range prev.Devices {
			holds[d.Device], holds[d.Group] = true, true
		}
		why = "the claim is allocated other devices"
		for _, r := range cur.Status.Allocation.Devices.Results {
			if r.Driver == s.node.Driver && r.Pool == s.node.Name && holds[r.Device] {
				why = ""
			}
		}
	}
	if why != "" {
		klog.FromContext(ctx).Info("Handing on the EFAs of a claim the kubelet has not unprepared yet",
			"claim", klog.KRef(prev.Namespace, prev.Name), "uid", uid, "why", why,
			"note", "its pod was deleted without waiting for the kubelet; its containers may still run until the kubelet stops them")
	}
	return why != ""
}

// callReads are what a prepare call reads outside the claim state's lock,
// before it decides under it: the API server's answer on each prepared
// claim holding an EFA the call asks for (the forced-delete handover, see
// readClaim), and the kubelet's pods (the libfabric environment's check,
// and the pods a refusal names). A prepare thus makes no API or kubelet
// call while it holds the lock that the other kubelet calls, the spec
// repairs and the renumbering corrections wait for.
//
// The reads are a snapshot taken a moment before the decision. That is as
// good as one taken under the lock: the kubelet prepares a pod's claims
// after it admitted the pod, so the pod is in the list; a pod admitted
// since is checked when its own claims are prepared; and a holder the
// snapshot missed (prepared in between, which the helper's serialization
// of kubelet calls allows only to a rescan's renumbering) counts as
// holding its EFAs: the prepare is refused and the kubelet's retry reads
// again.
type callReads struct {
	// released: by prepared claim UID, whether the claim no longer holds
	// its EFAs in the API (readClaim); a holder not read holds them.
	released map[string]bool
	pods     claimenv.Pods
}

// toRead says, under the lock, what the call needs read: the prepared
// claims holding an EFA (or a device number) that a claim of the call not
// prepared yet asks for, and whether the kubelet's pods are needed (a
// holder to name, or the libfabric environment anywhere).
func (s *State) toRead(snap *inventory.Snapshot, claims []*resourceapi.ResourceClaim, call map[string]*resourceapi.ResourceClaim) (holders []checkpoint.Claim, pods bool) {
	held := s.held("")
	seen := map[string]bool{}
	for _, c := range claims {
		if _, ok := s.cur.Claims[string(c.UID)]; ok {
			continue
		}
		want, err := s.allocated(snap, c)
		if err != nil {
			continue
		}
		for _, w := range want {
			inv, ok := snap.Devices[w.Device]
			if !ok {
				continue
			}
			for _, key := range []string{"pci:" + inv.PCIAddress, "dev:" + devNumber(inv.Major, inv.Minor)} {
				// Only a holder that would refuse the claim is asked
				// about: shares of one EFA do not refuse each other.
				for _, h := range held[key] {
					if coShares(h, w.ShareID != "", inv.PCIAddress) || seen[h.uid] {
						continue
					}
					seen[h.uid] = true
					holders = append(holders, s.cur.Claims[h.uid])
				}
			}
		}
		if _, check, err := s.envCall(call, nil).InPlay(c); err == nil && check {
			pods = true
		}
	}
	return holders, s.deps.Pods != nil && (pods || len(holders) > 0)
}

// read makes the call's reads, without the lock.
func (s *State) read(ctx context.Context, holders []checkpoint.Claim, pods bool) *callReads {
	rd := &callReads{released: map[string]bool{}, pods: claimenv.Pods{Available: s.deps.Pods != nil}}
	for _, h := range holders {
		rd.released[h.UID] = s.readClaim(ctx, h)
	}
	if pods {
		rd.pods.Listed = true
		rd.pods.List, rd.pods.Err = s.deps.Pods.List(ctx)
	}
	return rd
}

// envCall is what the libfabric environment's decisions see in a kubelet
// call: the claims prepared so far, the call's claims and the call's
// reads of the kubelet's pods (none for rd nil).
func (s *State) envCall(call map[string]*resourceapi.ResourceClaim, rd *callReads) *claimenv.Call {
	c := &claimenv.Call{Driver: s.node.Driver, Pool: s.node.Name, Prepared: s.cur.Claims, Claims: call}
	if rd != nil {
		c.Pods = rd.pods
	}
	return c
}

// devNumber is a character device's number as the checkpoint keeps it.
func devNumber(major, minor uint32) string { return fmt.Sprintf("%d:%d", major, minor) }

// readCurrent reads an EFA's RDMA device and uverbs device from sysfs now.
func readCurrent(r *sysread.Reader, pciAddress string) (efa.Current, error) {
	a, err := pcie.ParseAddress(pciAddress)
	if err != nil {
		return efa.Current{}, err
	}
	return efa.ReadCurrent(r, a)
}
