package claims

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"slices"

	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/plugin/driver/checkpoint"
	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/inventory"
	"github.com/efakit/efakit/plugin/driver/podresources"
)

// After the efa or ib_uverbs module is reloaded, the kernel numbers the
// uverbs devices anew: the number a prepared claim's containers were given
// (231:208, say) may belong to another EFA now. A container that restarts
// gets its devices from the claim's CDI spec again, so the spec must
// follow the renumbering as soon as the plugin sees it (a scan: the
// kernel's uevents within a second, the health checks every
// --health-interval), not at the plugin's next start. Containers started
// before keep the old number until they restart; the plugin keeps that
// number held by the claim (no other claim is given it) until the claim is
// unprepared, and names the pods that still run with it.

// claimRenumbered is a prepared claim with its EFAs that were renumbered.
type claimRenumbered struct {
	UID, Namespace, Name string
	Devices              []renumbering
}

// Renumbered tells whether an EFA of a prepared claim (as last saved) has,
// in snap, another RDMA name or uverbs device than the claim's record.
// The scanning goroutine asks it after each scan, and the kubelet's call
// after each prepare, so that whichever of the two comes second sees the
// other (see RepairSpecs). It never waits for the lock: when no call
// holds it, the checkpoint is read again first if it changed (one stat
// tells: the other plugin pod of a rolling update may have prepared
// claims since); when a call holds it, that call reads it again itself.
func (s *State) Renumbered(ctx context.Context, snap *inventory.Snapshot) bool {
	if s.mu.TryLock() {
		s.reloadState(ctx)
		s.mu.Unlock()
	}
	for _, c := range s.Committed().Claims {
		for _, d := range c.Devices {
			inv, ok := snap.Devices[d.Device]
			if !ok || inv.EFA == nil {
				continue // gone, or no uverbs device: health says so
			}
			if inv.RDMAName != d.RDMAName || inv.Uverbs != d.Uverbs || inv.Major != d.Major || inv.Minor != d.Minor {
				return true
			}
		}
	}
	return false
}

// reportRenumbered records, for each claim, an Event on the Node that
// names its renumbered EFAs and the pods that use the claim (from the
// kubelet): their containers that started before hold the old numbers.
func (s *State) reportRenumbered(ctx context.Context, claims []claimRenumbered) {
	if len(claims) == 0 {
		return
	}
	var pods []podresources.Pod
	if s.deps.Pods != nil {
		var err error
		if pods, err = s.deps.Pods.List(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Listing the pods that use renumbered EFAs")
		}
	}
	for _, c := range claims {
		var moves []string
		for _, d := range c.Devices {
			moves = append(moves, fmt.Sprintf("%s was %s, is %s", d.Device, d.Was, d.Now))
		}
		users := podresources.Using(pods, c.Namespace, c.Name)
		who := "pods that use it"
		if len(users) > 0 {
			who = "pods " + strings.Join(users, ", ")
		}
		klog.FromContext(ctx).Info("Pods run with device numbers of a renumbered EFA", "claim", klog.KRef(c.Namespace, c.Name), "pods", users)
		s.deps.Events.Record(corev1.EventTypeWarning, events.ReasonRenumbered, c.UID, fmt.Sprintf(
			"EFAs of claim %s/%s renumbered (efa or ib_uverbs module reloaded?): %s. Its CDI spec is corrected for containers that start from now on; containers of %s that started before hold the old numbers, which may reach another EFA, until they restart. The old numbers stay held until the claim is unprepared.",
			c.Namespace, c.Name, strings.Join(moves, "; "), who))
	}
}

// renumbering is one EFA of a prepared claim found with another RDMA name
// or uverbs device than its spec gave (a module reload numbered them anew).
type renumbering struct {
	Device   string // published name
	Was, Now string // "rdmap79s0 uverbs0 231:192"
}

// refresh checks a prepared claim's EFAs against sysfs: an EFA whose RDMA
// name or uverbs device changed (a module reload numbers them anew) gets
// the new values in its spec and the checkpoint, and its old device
// number is kept as stale, held by the claim, because containers started
// before still hold it. The spec is written again when it is missing or
// changed. An EFA that cannot be read keeps its record (and so its
// numbers stay held): it is reported, not guessed at. A change is saved
// at once. It returns what was renumbered.
func (s *State) refresh(ctx context.Context, c checkpoint.Claim) (checkpoint.Claim, []renumbering, error) {
	b := s.begin()
	c, moved, err := s.refreshIn(ctx, b, c)
	if serr := s.commit(b); serr != nil && err == nil {
		err = serr
	}
	return c, moved, err
}

// refreshIn is refresh within a kubelet call's batch: a change is saved
// with the call's other changes.
func (s *State) refreshIn(ctx context.Context, b *batch, c checkpoint.Claim) (checkpoint.Claim, []renumbering, error) {
	logger := klog.FromContext(ctx)
	r := sysread.New(s.files.Sysfs)
	var moved []renumbering
	devs := slices.Clone(c.Devices)
	for i, d := range devs {
		cur, err := readCurrent(r, d.PCIAddress)
		if err != nil {
			logger.Error(err, "Prepared EFA unreadable; its record is kept", "claim", klog.KRef(c.Namespace, c.Name), "device", d.Device)
			continue
		}
		if cur.RDMAName == d.RDMAName && cur.Verbs.Name == d.Uverbs && cur.Verbs.Major == d.Major && cur.Verbs.Minor == d.Minor {
			continue
		}
		old := devNumber(d.Major, d.Minor)
		m := renumbering{Device: d.Device, Was: d.RDMAName + " " + d.Uverbs + " " + old,
			Now: cur.RDMAName + " " + cur.Verbs.Name + " " + devNumber(cur.Verbs.Major, cur.Verbs.Minor)}
		logger.Error(nil, "EFA of a prepared claim renumbered", "cause", "efa or ib_uverbs module reloaded?", "then", "CDI spec corrected; containers started before hold the old device number and may reach another EFA: restart them",
			"claim", klog.KRef(c.Namespace, c.Name), "device", d.Device, "was", m.Was, "now", m.Now)
		d.Stale = slices.Clone(d.Stale)
		if !slices.Contains(d.Stale, old) {
			d.Stale = append(d.Stale, old)
		}
		d.RDMAName, d.Uverbs, d.Major, d.Minor = cur.RDMAName, cur.Verbs.Name, cur.Verbs.Major, cur.Verbs.Minor
		devs[i] = d
		moved = append(moved, m)
		s.deps.Metrics.Renumbered.Inc()
		s.deps.AskRescan()
	}
	changed := len(moved) > 0
	if changed {
		c.Devices = devs
		held := s.held(c.UID)
		for _, d := range c.Devices {
			for _, h := range held["dev:"+devNumber(d.Major, d.Minor)] {
				if coShares(h, d.ShareID != "", d.PCIAddress) {
					continue // another share of the same EFA
				}
				o := s.cur.Claims[h.uid]
				logger.Error(nil, "Containers of two claims hold one device number after a renumbering", "then", "restart the pods of both", "claim", klog.KRef(c.Namespace, c.Name), "other", klog.KRef(o.Namespace, o.Name), "device", d.Uverbs)
			}
		}
		if c.Env != nil {
			// FI_EFA_IFACE names RDMA devices, which a reload may
			// rename too. A new map: the old one is the saved state's.
			reqs, env := cdiRequests(c), make(map[string][]string, len(c.Env))
			for req, vars := range c.Env {
				env[req] = withIface(vars, reqs[req].Devices)
			}
			c.Env = env
		}
	}
	// A spec that an earlier efakit wrote without a CDI device per
	// allocated device is written again in this form: the kubelet's IDs
	// (the request's, for a claim prepared then) stay in it.
	ok, same, err := s.files.CDI.Holds(c.UID, cdiRequests(c))
	switch {
	case err != nil || len(c.Devices) == 0:
	case !ok:
		logger.Info("Wrote a lost CDI spec again", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID)
		s.deps.Metrics.SpecsRestored.Inc()
	case !same && !changed:
		logger.Info("Wrote a CDI spec again with a CDI device per allocated device", "claim", klog.KRef(c.Namespace, c.Name), "uid", c.UID)
	}
	if len(c.Devices) > 0 && (changed || err != nil || !same) {
		ids, err := s.files.CDI.Write(c.UID, cdiRequests(c))
		if err != nil {
			return c, moved, err
		}
		c.CDIDeviceIDs = ids
	}
	if changed {
		s.put(b, c)
	}
	return c, moved, nil
}

// withIface replaces FI_EFA_IFACE's value in vars, if it is there.
func withIface(vars []string, devs []cdi.Device) []string {
	out := slices.Clone(vars)
	for i, v := range out {
		if strings.HasPrefix(v, cdi.EnvIface+"=") {
			out[i] = cdi.EnvIface + "=" + cdi.Iface(devs)
		}
	}
	return out
}
