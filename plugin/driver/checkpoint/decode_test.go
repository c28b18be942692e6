package checkpoint

import (
	"encoding/json"
	"testing"
)

// FuzzDecode: any bytes decode to a checked state or an error, never a
// panic; what decodes survives Save's encoding unchanged.
func FuzzDecode(f *testing.F) {
	st := &State{Version: Version, BootID: "8a9c6a3e-6d51-4d0e-9a4b-1f0b3c7a2d11", Claims: map[string]Claim{
		"u1": {UID: "u1", Namespace: "ns", Name: "c", Devices: []PreparedDevice{{Request: "efa", Pool: "n", Device: "efa-0000-4f-00-0", RDMAName: "rdmap79s0", Uverbs: "uverbs0", Major: 231, Minor: 192}}},
	}}
	data, _ := json.Marshal(st)
	good, _ := json.Marshal(file{Version: Version, Checksum: checksum(data), Data: data})
	for _, seed := range [][]byte{good, good[:len(good)/2], {}, []byte("null"), []byte(`{"version":1,"checksum":"","data":{}}`), []byte(`{"version":1}`)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decode(data)
		if err != nil {
			return
		}
		if st.Version != Version || st.BootID == "" || st.Claims == nil {
			t.Fatalf("decoded a state that check refuses: %+v", st)
		}
		for uid, c := range st.Claims {
			if c.UID != uid {
				t.Fatalf("claim %q under %q", c.UID, uid)
			}
		}
	})
}
