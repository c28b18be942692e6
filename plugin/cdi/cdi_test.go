package cdi_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/efakit/efakit/plugin/cdi"
)

// uid is a Kubernetes UID: a UUID, here starting with a digit.
const uid = "6f1c2b9e-1d2a-4c3b-9f8e-0123456789ab"

// efas are four EFAs of a p5, as discovery reports them.
var efas = []cdi.Device{
	{Name: "rdmap79s0", Uverbs: "uverbs0", Major: 231, Minor: 192},
	{Name: "rdmap80s0", Uverbs: "uverbs1", Major: 231, Minor: 193},
	{Name: "rdmap81s0", Uverbs: "uverbs2", Major: 231, Minor: 194},
	{Name: "rdmap82s0", Uverbs: "uverbs3", Major: 231, Minor: 195},
}

// nodes makes requests of device nodes only, the default.
func nodes(m map[string][]cdi.Device) map[string]cdi.Request {
	if m == nil {
		return nil
	}
	out := make(map[string]cdi.Request, len(m))
	for r, d := range m {
		out[r] = cdi.Request{Devices: d}
	}
	return out
}

func newWriter(t testing.TB) (*cdi.Writer, string) {
	t.Helper()
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, "dra.net")
	require.NoError(t, err)
	return w, dir
}

// node is the device node the spec must hold for an EFA.
func node(d cdi.Device) *specs.DeviceNode {
	return &specs.DeviceNode{
		Path: "/dev/infiniband/" + d.Uverbs, Type: "c",
		Major: int64(d.Major), Minor: int64(d.Minor), Permissions: "rw",
	}
}

// listDir lists a directory's names.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestValidateClaimUID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		uid string
		ok  bool
	}{
		{uid, true},
		{"ABCDEF-abcdef-0123", true},
		{"a", true},
		{"-", true},
		{strings.Repeat("a", cdi.MaxClaimUIDLength), true},
		{strings.Repeat("a", cdi.MaxClaimUIDLength+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"/", false},
		{"../etc", false},
		{"a/b", false},
		{"a\\b", false},
		{"a\x00b", false},
		{"a b", false},
		{" a", false},
		{"a\n", false},
		{"a_b", false},
		{"a.json", false},
		{"a:b", false},
		{"é", false},
		{"6f1c2b9e-1d2a-4c3b-9f8e-0123456789ab\x00", false},
	} {
		err := cdi.ValidateClaimUID(tc.uid)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.uid)
		} else {
			assert.Error(t, err, "%q", tc.uid)
		}
	}
}

func TestNewWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, "dra.net")
	require.NoError(t, err)
	assert.Equal(t, dir, w.Dir())
	assert.Equal(t, "dra.net/efa", w.Kind())

	for _, name := range []string{"", "1dra.net", "dra/net", "dra.net-", "dra net", "dra=net"} {
		_, err := cdi.NewWriter(dir, name)
		assert.Error(t, err, "driver name %q", name)
	}
	for _, d := range []string{"", "relative/cdi", "."} {
		_, err := cdi.NewWriter(d, "dra.net")
		assert.Error(t, err, "dir %q", d)
	}
}

// TestWrite4 checks the exact content of a 4-EFA claim's spec, read back
// from disk by Load and again by the CDI library's own reader.
func TestWrite4(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)

	ids, err := w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"efa": "dra.net/efa=" + uid + "-efa"}, ids)

	path := filepath.Join(dir, "dra.net-efa_"+uid+".json")
	p, err := w.SpecPath(uid)
	require.NoError(t, err)
	assert.Equal(t, path, p)
	assert.Equal(t, []string{filepath.Base(path)}, listDir(t, dir))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), fi.Mode().Perm())

	want := &specs.Spec{
		// A device name that starts with a digit needs 0.5.0.
		Version: "0.5.0",
		Kind:    "dra.net/efa",
		Devices: []specs.Device{{
			Name: uid + "-efa",
			ContainerEdits: specs.ContainerEdits{
				DeviceNodes: []*specs.DeviceNode{node(efas[0]), node(efas[1]), node(efas[2]), node(efas[3])},
			},
		}},
	}
	got, err := w.Load(uid)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// The library's reader, as a runtime reads the file.
	spec, err := cdiapi.ReadSpec(path, 0)
	require.NoError(t, err)
	assert.Equal(t, want, spec.Spec)
	assert.Equal(t, "dra.net", spec.GetVendor())
	assert.Equal(t, "efa", spec.GetClass())
	require.NotNil(t, spec.GetDevice(uid+"-efa"))
	assert.Equal(t, ids["efa"], spec.GetDevice(uid+"-efa").GetQualifiedName())
	v, err := specs.MinimumRequiredVersion(spec.Spec)
	require.NoError(t, err)
	assert.Equal(t, v, spec.Version)
	require.NoError(t, specs.ValidateVersion(spec.Spec))

	// Nothing but the fields above: no hostPath, no rdma_cm, no hooks.
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	assert.ElementsMatch(t, []string{"cdiVersion", "kind", "devices", "containerEdits"}, keys(generic))
	dev := generic["devices"].([]any)[0].(map[string]any)
	edits := dev["containerEdits"].(map[string]any)
	// No environment by default: the device nodes are the contract.
	assert.ElementsMatch(t, []string{"deviceNodes"}, keys(edits))
	assert.NotContains(t, string(raw), "rdma_cm")
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestCache resolves the IDs Write returns through a CDI cache over the
// directory, the way containerd and CRI-O find them.
func TestCache(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	ids, err := w.Write(uid, nodes(map[string][]cdi.Device{"a": efas[:2], "b": efas[2:]}))
	require.NoError(t, err)
	ids2, err := w.Write("b2c3d4e5-0000-4000-8000-000000000001", nodes(map[string][]cdi.Device{"efa": efas[:1]}))
	require.NoError(t, err)

	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	assert.Empty(t, cache.GetErrors())
	for _, id := range []string{ids["a"], ids["b"], ids2["efa"]} {
		d := cache.GetDevice(id)
		require.NotNil(t, d, id)
		assert.Equal(t, id, d.GetQualifiedName())
	}
	assert.Len(t, cache.ListDevices(), 3)
}

func TestVersionForLetterUID(t *testing.T) {
	t.Parallel()
	w, _ := newWriter(t)
	u := "b2c3d4e5-0000-4000-8000-000000000001"
	_, err := w.Write(u, nodes(map[string][]cdi.Device{"efa": efas[:1]}))
	require.NoError(t, err)
	got, err := w.Load(u)
	require.NoError(t, err)
	// Nothing in the spec needs more than the oldest supported version.
	assert.Equal(t, "0.3.0", got.Version)
}

func TestTwoRequests(t *testing.T) {
	t.Parallel()
	w, _ := newWriter(t)
	// Given out of order within each request: the order is kept. The first
	// request asks for the libfabric environment, the second for none.
	env := []string{cdi.EnvProvider + "=efa", cdi.EnvIface + "=" + cdi.Iface([]cdi.Device{efas[1], efas[0]})}
	reqs := map[string]cdi.Request{
		"gpu0-nics": {Devices: []cdi.Device{efas[1], efas[0]}, Env: env},
		"gpu1-nics": {Devices: []cdi.Device{efas[3], efas[2]}},
	}
	ids, err := w.Write(uid, reqs)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"gpu0-nics": "dra.net/efa=" + uid + "-gpu0-nics",
		"gpu1-nics": "dra.net/efa=" + uid + "-gpu1-nics",
	}, ids)

	got, err := w.Load(uid)
	require.NoError(t, err)
	require.Len(t, got.Devices, 2)
	want := []specs.Device{
		{
			Name: uid + "-gpu0-nics",
			ContainerEdits: specs.ContainerEdits{
				Env:         []string{"FI_PROVIDER=efa", "FI_EFA_IFACE=rdmap80s0,rdmap79s0"},
				DeviceNodes: []*specs.DeviceNode{node(efas[1]), node(efas[0])},
			},
		},
		{
			Name: uid + "-gpu1-nics",
			ContainerEdits: specs.ContainerEdits{
				DeviceNodes: []*specs.DeviceNode{node(efas[3]), node(efas[2])},
			},
		},
	}
	assert.Equal(t, want, got.Devices)
}

// TestBadEnv: variables that are not NAME=value, or a name set twice, are
// refused before anything is written.
func TestBadEnv(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	for _, env := range [][]string{{"FI_PROVIDER"}, {"=efa"}, {"1X=y"}, {"A B=c"}, {"X=1", "X=2"}, {"X=a\x00b"}} {
		_, err := w.Write(uid, map[string]cdi.Request{"efa": {Devices: efas[:1], Env: env}})
		assert.Error(t, err, "%q", env)
	}
	assert.Empty(t, listDir(t, dir))
}

func TestRemoveExists(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)

	ok, err := w.Exists(uid)
	require.NoError(t, err)
	assert.False(t, ok)
	// Removing what was never written, and from a directory that does not
	// exist, is no error.
	require.NoError(t, w.Remove(uid))
	w2, err := cdi.NewWriter(filepath.Join(dir, "missing"), "dra.net")
	require.NoError(t, err)
	require.NoError(t, w2.Remove(uid))
	ok, err = w2.Exists(uid)
	require.NoError(t, err)
	assert.False(t, ok)

	_, err = w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
	require.NoError(t, err)
	ok, err = w.Exists(uid)
	require.NoError(t, err)
	assert.True(t, ok)

	require.NoError(t, w.Remove(uid))
	ok, err = w.Exists(uid)
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, w.Remove(uid))
	assert.Empty(t, listDir(t, dir))

	_, err = w.Load(uid)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestExistsNotRegular(t *testing.T) {
	t.Parallel()
	w, _ := newWriter(t)
	p, err := w.SpecPath(uid)
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(p, 0o755))
	_, err = w.Exists(uid)
	assert.Error(t, err)
}

// TestWriteCreatesDir: a tmpfs /var/run/cdi is gone after a reboot.
func TestWriteCreatesDir(t *testing.T) {
	t.Parallel()
	w, err := cdi.NewWriter(filepath.Join(t.TempDir(), "var", "run", "cdi"), "dra.net")
	require.NoError(t, err)
	_, err = w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
	require.NoError(t, err)
	_, err = w.Load(uid)
	require.NoError(t, err)
}

func TestRewriteReplaces(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	_, err := w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
	require.NoError(t, err)
	_, err = w.Write(uid, nodes(map[string][]cdi.Device{"other": efas[3:]}))
	require.NoError(t, err)

	assert.Len(t, listDir(t, dir), 1)
	got, err := w.Load(uid)
	require.NoError(t, err)
	require.Len(t, got.Devices, 1)
	assert.Equal(t, uid+"-other", got.Devices[0].Name)
	assert.Equal(t, []*specs.DeviceNode{node(efas[3])}, got.Devices[0].ContainerEdits.DeviceNodes)
}

// TestNoTempFiles: a Write leaves the spec alone in the directory, and a
// failed Write leaves nothing.
func TestNoTempFiles(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	for i := 0; i < 5; i++ {
		_, err := w.Write(uid, nodes(map[string][]cdi.Device{"efa": efas}))
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"dra.net-efa_" + uid + ".json"}, listDir(t, dir))

	_, err := w.Write("c0ffee00-0000-4000-8000-000000000000", nodes(map[string][]cdi.Device{"bad/name": efas}))
	require.Error(t, err)
	assert.Equal(t, []string{"dra.net-efa_" + uid + ".json"}, listDir(t, dir))
}

func TestInvalidRequestName(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	// Kubernetes request names are DNS labels, but a subrequest's result
	// names "request/subrequest", which no CDI device name may hold.
	for _, req := range []string{"", "a/b", "req-", "a b", "ü", "a=b", "a,b", strings.Repeat("x", 10) + "\n"} {
		_, err := w.Write(uid, nodes(map[string][]cdi.Device{"ok": efas[:1], req: efas[1:2]}))
		assert.Error(t, err, "request %q", req)
		t.Log(err)
	}
	assert.Empty(t, listDir(t, dir))
}

func TestInvalidDevices(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	for name, devs := range map[string][]cdi.Device{
		"no EFA":           nil,
		"uverbs path":      {{Name: "rdmap79s0", Uverbs: "../../etc/passwd"}},
		"uverbs slash":     {{Name: "rdmap79s0", Uverbs: "uverbs3/../x"}},
		"uverbs no number": {{Name: "rdmap79s0", Uverbs: "uverbs"}},
		"uverbs overflow":  {{Name: "rdmap79s0", Uverbs: "uverbs99999999999"}},
		"not uverbs":       {{Name: "rdmap79s0", Uverbs: "umad0"}},
		"empty name":       {{Name: "", Uverbs: "uverbs0"}},
		"comma in name":    {{Name: "a,b", Uverbs: "uverbs0"}},
		"space in name":    {{Name: "a b", Uverbs: "uverbs0"}},
		"long name":        {{Name: strings.Repeat("r", 65), Uverbs: "uverbs0"}},
		"duplicate":        {efas[0], efas[1], efas[0]},
	} {
		_, err := w.Write(uid, nodes(map[string][]cdi.Device{"efa": devs}))
		assert.Error(t, err, name)
		t.Log(err)
	}
	_, err := w.Write(uid, nil)
	assert.Error(t, err, "no requests")
	assert.Empty(t, listDir(t, dir))
}

func TestInvalidUIDEverywhere(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	for _, u := range []string{"", "..", "../x", "a/b", "a\x00"} {
		_, err := w.Write(u, nodes(map[string][]cdi.Device{"efa": efas}))
		assert.Error(t, err)
		assert.Error(t, w.Remove(u))
		_, err = w.Exists(u)
		assert.Error(t, err)
		_, err = w.Load(u)
		assert.Error(t, err)
		_, err = w.SpecPath(u)
		assert.Error(t, err)
	}
	assert.Empty(t, listDir(t, dir))
}

// TestLoadRejects: Load validates what it reads, as a runtime would.
func TestLoadRejects(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{
		"not json":      "{",
		"unknown field": `{"cdiVersion":"0.5.0","kind":"dra.net/efa","devices":[{"name":"x","containerEdits":{"env":["A=b"]}}],"bogus":1}`,
		"other kind":    `{"cdiVersion":"0.5.0","kind":"other.io/efa","devices":[{"name":"x","containerEdits":{"env":["A=b"]}}]}`,
		"no devices":    `{"cdiVersion":"0.5.0","kind":"dra.net/efa","devices":[]}`,
		"old version":   `{"cdiVersion":"0.3.0","kind":"dra.net/efa","devices":[{"name":"0x","containerEdits":{"env":["A=b"]}}]}`,
		"bad env":       `{"cdiVersion":"0.5.0","kind":"dra.net/efa","devices":[{"name":"x","containerEdits":{"env":["=b"]}}]}`,
		"empty edits":   `{"cdiVersion":"0.5.0","kind":"dra.net/efa","devices":[{"name":"x","containerEdits":{}}]}`,
	} {
		w, _ := newWriter(t)
		p, err := w.SpecPath(uid)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		_, err = w.Load(uid)
		assert.Error(t, err, name)
		assert.False(t, errors.Is(err, fs.ErrNotExist), name)
		t.Log(err)
	}
}

// FuzzValidateClaimUID: what ValidateClaimUID accepts names a file directly
// in the spec directory.
func FuzzValidateClaimUID(f *testing.F) {
	for _, s := range []string{uid, "", ".", "..", "/", "../x", "a/b", "a\x00", "-", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	dir := "/var/run/cdi"
	w, err := cdi.NewWriter(dir, "dra.net")
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) {
		err := cdi.ValidateClaimUID(s)
		p, perr := w.SpecPath(s)
		if (err == nil) != (perr == nil) {
			t.Fatalf("ValidateClaimUID(%q) = %v, SpecPath = %v", s, err, perr)
		}
		if err != nil {
			return
		}
		if strings.ContainsAny(s, "/.\x00") || s == "" || len(s) > cdi.MaxClaimUIDLength {
			t.Fatalf("accepted %q", s)
		}
		joined := filepath.Join(dir, s)
		if filepath.Dir(joined) != dir || filepath.Base(joined) != s {
			t.Fatalf("%q leaves %s: %s", s, dir, joined)
		}
		if filepath.Dir(p) != dir || !strings.HasSuffix(p, "_"+s+".json") {
			t.Fatalf("spec path of %q is %s", s, p)
		}
	})
}

func BenchmarkWrite4(b *testing.B) {
	w, _ := newWriter(b)
	reqs := map[string][]cdi.Device{"efa": efas}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := w.Write(uid, nodes(reqs)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAllocatedDevices: each allocated device of a request is a CDI
// device of its own beside the request's, with its EFAs' nodes and the
// request's variables. A container given every allocated device's ID gets
// what the request's ID gives: the same nodes and the same environment,
// as the CDI library injects them into an OCI spec, as containerd does.
func TestAllocatedDevices(t *testing.T) {
	t.Parallel()
	w, dir := newWriter(t)
	env := []string{cdi.EnvProvider + "=efa", cdi.EnvIface + "=" + cdi.Iface(efas)}
	var alloc []cdi.Allocated
	for _, d := range efas {
		alloc = append(alloc, cdi.Allocated{Name: "efa-" + d.Name, Devices: []cdi.Device{d}})
	}
	ids, err := w.Write(uid, map[string]cdi.Request{"gpu-efas": {Devices: efas, Env: env, Allocated: alloc, Whole: true}})
	require.NoError(t, err)
	assert.Equal(t, "dra.net/efa="+uid+"-gpu-efas", ids["gpu-efas"])
	got, err := w.Load(uid)
	require.NoError(t, err)
	require.Len(t, got.Devices, 5)
	assert.Equal(t, cdi.DeviceName(uid, "gpu-efas"), got.Devices[0].Name, "the whole request's device first")
	var each []string
	for i, d := range efas {
		dev := got.Devices[1+i]
		assert.Equal(t, cdi.AllocatedName(uid, "gpu-efas", "efa-"+d.Name), dev.Name)
		assert.Equal(t, []*specs.DeviceNode{node(d)}, dev.ContainerEdits.DeviceNodes)
		assert.Equal(t, env, dev.ContainerEdits.Env, "every allocated device sets the request's variables: the same values, whichever the runtime applies last")
		each = append(each, w.ID(dev.Name))
	}
	assert.Equal(t, "dra.net/efa="+uid+"-gpu-efas_efa-rdmap81s0", each[2])

	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors())
	inject := func(ids ...string) *oci.Spec {
		s := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
		unresolved, err := cache.InjectDevices(s, ids...)
		require.NoError(t, err)
		require.Empty(t, unresolved)
		return s
	}
	whole, split := inject(ids["gpu-efas"]), inject(each...)
	assert.Equal(t, whole.Process.Env, split.Process.Env)
	assert.Equal(t, whole.Linux.Devices, split.Linux.Devices)
	assert.Equal(t, whole.Linux.Resources, split.Linux.Resources)
	assert.Len(t, split.Linux.Devices, 4)

	// Without Whole, the allocated devices only.
	reqs := map[string]cdi.Request{"gpu-efas": {Devices: efas, Env: env, Allocated: alloc}}
	ids, err = w.Write(uid, reqs)
	require.NoError(t, err)
	assert.Empty(t, ids)
	got, err = w.Load(uid)
	require.NoError(t, err)
	require.Len(t, got.Devices, 4)
	assert.Equal(t, cdi.AllocatedName(uid, "gpu-efas", "efa-rdmap79s0"), got.Devices[0].Name)

	// Holds tells a spec of this form from one without the allocated
	// devices (an earlier efakit's) and from none.
	exists, same, err := w.Holds(uid, reqs)
	require.NoError(t, err)
	assert.True(t, exists)
	assert.True(t, same)
	// Devices besides those (a later efakit's) are no difference.
	_, err = w.Write(uid, map[string]cdi.Request{"gpu-efas": reqs["gpu-efas"], "other": {Devices: efas[:1]}})
	require.NoError(t, err)
	exists, same, err = w.Holds(uid, reqs)
	require.NoError(t, err)
	assert.True(t, exists)
	assert.True(t, same)
	_, err = w.Write(uid, map[string]cdi.Request{"gpu-efas": {Devices: efas, Env: env}})
	require.NoError(t, err)
	exists, same, err = w.Holds(uid, reqs)
	require.NoError(t, err)
	assert.True(t, exists)
	assert.False(t, same)
	require.NoError(t, w.Remove(uid))
	exists, same, err = w.Holds(uid, reqs)
	require.NoError(t, err)
	assert.False(t, exists)
	assert.False(t, same)
}

// TestBadAllocated: an allocated device with an EFA its request does not
// hold, without a name or named twice, is refused before anything is
// written.
func TestBadAllocated(t *testing.T) {
	t.Parallel()
	for name, a := range map[string][]cdi.Allocated{
		"not the request's": {{Name: "efa-x", Devices: []cdi.Device{efas[3]}}},
		"no name":           {{Name: "", Devices: efas[:1]}},
		"twice":             {{Name: "a", Devices: efas[:1]}, {Name: "a", Devices: efas[1:2]}},
		"bad name":          {{Name: "a/b", Devices: efas[:1]}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, dir := newWriter(t)
			_, err := w.Write(uid, map[string]cdi.Request{"efa": {Devices: efas[:2], Allocated: a}})
			require.Error(t, err)
			assert.Empty(t, listDir(t, dir))
		})
	}
}
