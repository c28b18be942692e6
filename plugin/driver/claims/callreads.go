package claims

import (
	"context"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/podresources"
)

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
	listed   bool // the kubelet was asked
	pods     []podresources.Pod
	podsErr  error
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
		if _, check, err := s.envInPlay(c, call); err == nil && check {
			pods = true
		}
	}
	return holders, s.deps.Pods != nil && (pods || len(holders) > 0)
}

// read makes the call's reads, without the lock.
func (s *State) read(ctx context.Context, holders []checkpoint.Claim, pods bool) *callReads {
	rd := &callReads{released: map[string]bool{}}
	for _, h := range holders {
		rd.released[h.UID] = s.readClaim(ctx, h)
	}
	if pods {
		rd.listed = true
		rd.pods, rd.podsErr = s.deps.Pods.List(ctx)
	}
	return rd
}

// claimUsers says which pods use a claim, for a message: " (pods a, b)",
// or "" when the kubelet was not asked or does not say.
func (rd *callReads) claimUsers(namespace, name string) string {
	if !rd.listed || rd.podsErr != nil {
		return ""
	}
	users := podresources.Using(rd.pods, namespace, name)
	if len(users) == 0 {
		return ""
	}
	return " (pods " + strings.Join(users, ", ") + ")"
}
