package claims

import (
	"context"
	"slices"
	"time"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// describeClaim names a prepared claim for a refusal: namespace/name, its
// UID, and the pods that use it where the kubelet said (the call's reads).
func (s *State) describeClaim(uid string, rd *callReads) string {
	c, ok := s.cur.Claims[uid]
	if !ok {
		return uid
	}
	return c.Namespace + "/" + c.Name + " (" + uid + ")" + rd.claimUsers(c.Namespace, c.Name)
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
