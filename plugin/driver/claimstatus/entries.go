package claimstatus

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metaapply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/utils/ptr"
)

// entries builds the claim's apply: each wanted device's entry with its
// conditions' transition times kept from the last apply while their
// status stays, sorted by device and share. Called with w.mu held.
func (w *Writer) entries(st *state, c Claim) ([]resourceapi.AllocatedDeviceStatus, map[key]map[string]metav1.Condition, error) {
	now := metav1.NewTime(w.o.Now().Truncate(time.Second))
	applied := map[key]map[string]metav1.Condition{}
	out := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.Devices))
	for _, d := range c.Devices {
		k := key{d.Device, d.ShareID}
		e := resourceapi.AllocatedDeviceStatus{Driver: w.o.DriverName, Pool: w.o.Pool, Device: d.Device}
		if d.ShareID != "" {
			share := d.ShareID
			e.ShareID = &share
		}
		conds := map[string]metav1.Condition{}
		for _, wc := range d.Conditions {
			mc := metav1.Condition{Type: wc.Type, Status: wc.Status, Reason: wc.Reason, Message: wc.Message, LastTransitionTime: now}
			if old, ok := st.applied[k][wc.Type]; ok && old.Status == wc.Status && !old.LastTransitionTime.IsZero() {
				mc.LastTransitionTime = old.LastTransitionTime
			}
			conds[wc.Type] = mc
			e.Conditions = append(e.Conditions, mc)
		}
		applied[k] = conds
		if d.Data != nil {
			raw, err := json.Marshal(d.Data)
			if err != nil {
				return nil, nil, fmt.Errorf("device %s: data: %w", d.Device, err)
			}
			if len(raw) > resourceapi.AllocatedDeviceStatusDataMaxLength {
				return nil, nil, fmt.Errorf("device %s: data of %d bytes, the API allows %d", d.Device, len(raw), resourceapi.AllocatedDeviceStatusDataMaxLength)
			}
			e.Data = &runtime.RawExtension{Raw: raw}
		}
		out = append(out, e)
	}
	sortEntries(out)
	return out, applied, nil
}

// sameEntries tells whether two lists of entries say the same, their data
// compared as JSON values: the API server gives data back with its keys
// in another order than sent (a server-side apply goes through an
// unstructured map, whose keys are marshalled sorted), and entries read
// from it must compare equal to the same entries built here.
func sameEntries(a, b []resourceapi.AllocatedDeviceStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !sameData(x.Data, y.Data) {
			return false
		}
		x.Data, y.Data = nil, nil
		if !apiequality.Semantic.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func sameData(a, b *runtime.RawExtension) bool {
	if a == nil || b == nil {
		return a == b
	}
	var x, y any
	if json.Unmarshal(a.Raw, &x) != nil || json.Unmarshal(b.Raw, &y) != nil {
		return bytes.Equal(a.Raw, b.Raw)
	}
	return reflect.DeepEqual(x, y)
}

// sortEntries sorts entries by device and share.
func sortEntries(es []resourceapi.AllocatedDeviceStatus) {
	slices.SortFunc(es, func(a, b resourceapi.AllocatedDeviceStatus) int {
		return cmp.Or(strings.Compare(a.Device, b.Device), strings.Compare(ptr.Deref(a.ShareID, ""), ptr.Deref(b.ShareID, "")))
	})
}

// applyOf is an entry as an apply configuration.
func applyOf(e resourceapi.AllocatedDeviceStatus) *resourceapply.AllocatedDeviceStatusApplyConfiguration {
	a := resourceapply.AllocatedDeviceStatus().WithDriver(e.Driver).WithPool(e.Pool).WithDevice(e.Device)
	if e.ShareID != nil {
		a.WithShareID(*e.ShareID)
	}
	for _, c := range e.Conditions {
		a.WithConditions(metaapply.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
			WithMessage(c.Message).WithLastTransitionTime(c.LastTransitionTime))
	}
	if e.Data != nil {
		a.WithData(*e.Data)
	}
	return a
}
