package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/sysfs"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestListJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("list", "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, 32)
	first := got[0]
	for _, k := range []string{"name", "pciAddress", "generation", "uverbs", "devicePath", "numaNode", "pcieRoot", "ports"} {
		assert.Contains(t, first, k)
	}
	assert.Equal(t, "rdmap79s0", first["name"])
	assert.Equal(t, "0000:4f:00.0", first["pciAddress"])
	assert.Equal(t, "efa1", first["generation"])
	assert.Equal(t, "uverbs0", first["uverbs"])
	assert.Equal(t, "/dev/infiniband/uverbs0", first["devicePath"])
	assert.Equal(t, float64(0), first["numaNode"])
	assert.Equal(t, "pci0000:44", first["pcieRoot"])
	assert.Equal(t, "Elastic Fabric Adapter (EFA)", first["pciDevice"])
}

func TestListNoNUMAIsNull(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("list", "--sysfs", "../../../testdata/sysfs/g5.8xlarge.sysfs", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"numaNode": null`)
	assert.Contains(t, out, `"name": "efa_0"`)
}

func TestListFormats(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI("list", "--sysfs", "../../../testdata/sysfs/trn1.32xlarge.sysfs")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "rdmap16s25")
	assert.Contains(t, out, "NAME")
	code, out, _ = runCLI("list", "--sysfs", "../../../testdata/sysfs/trn1.32xlarge.sysfs", "-o", "yaml")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "  name: rdmap16s25\n")
	code, out, _ = runCLI("list", "--sysfs", "../../../testdata/sysfs/m5.xlarge.sysfs", "-o", "json")
	require.Equal(t, 0, code)
	assert.Equal(t, "[]\n", out)
	code, _, _ = runCLI("list", "-o", "xml")
	assert.Equal(t, 2, code)
	code, _, errOut := runCLI("list", "--sysfs", "/nonexistent")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "/nonexistent")
	code, _, _ = runCLI("frobnicate")
	assert.Equal(t, 2, code)
	code, out, _ = runCLI("version")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "efakit")
}

// TestListDamaged: the damaged device's error goes to stderr, the exit code
// is 1, and the other devices are still printed.
func TestListDamaged(t *testing.T) {
	t.Parallel()
	root, err := sysfs.OpenCapture("../../../testdata/sysfs/p4d.24xlarge.sysfs")
	require.NoError(t, err)
	var es []sysfs.Entry
	for _, e := range root.ReadLinkFS.(*sysfs.MemFS).Entries() {
		if e.Path == "devices/pci0000:20/0000:20:1b.0/infiniband_verbs/uverbs1/dev" {
			e.Data = []byte("garbage\n")
		}
		if e.Path == "bus/pci/devices/0000:90:1b.0" {
			e.Target = "../../../../outside"
		}
		es = append(es, e)
	}
	file := filepath.Join(t.TempDir(), "damaged.sysfs")
	var buf bytes.Buffer
	require.NoError(t, sysfs.WriteCapture(&buf, nil, es))
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o644))

	code, out, errOut := runCLI("list", "--sysfs", file, "-o", "json")
	assert.Equal(t, 1, code)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	var names []string
	for _, d := range got {
		names = append(names, d["name"].(string))
	}
	assert.Equal(t, []string{"rdmap16s27", "rdmap32s27", "rdmap160s27"}, names)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Len(t, lines, 2, errOut)
	assert.Contains(t, errOut, "rdmap32s27: devices/pci0000:20/0000:20:1b.0/infiniband_verbs/uverbs1/dev")
	assert.Contains(t, errOut, "pci 0000:90:1b.0: bus/pci/devices/0000:90:1b.0: link leaves the sysfs root")
}

func TestSnapshotCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "trn2.sysfs")
	code, _, errOut := runCLI("snapshot", "--sysfs", "../../../testdata/sysfs/trn2.48xlarge.sysfs", "-o", out, "--unpack", filepath.Join(dir, "sys"))
	require.Equal(t, 0, code, errOut)
	for _, root := range []string{out, filepath.Join(dir, "sys")} {
		code, list, errOut := runCLI("list", "--sysfs", root, "-o", "json")
		require.Equal(t, 0, code, errOut)
		var got []map[string]any
		require.NoError(t, json.Unmarshal([]byte(list), &got))
		assert.Len(t, got, 16, root)
	}
	code, _, _ = runCLI("snapshot")
	assert.Equal(t, 2, code)
}

func TestSlicesAndClassesCommands(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI("slices", "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs", "--node", "n1", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Spec struct {
				Driver  string           `json:"driver"`
				Devices []map[string]any `json:"devices"`
			} `json:"spec"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "dra.net", list.Items[0].Spec.Driver)
	assert.Len(t, list.Items[0].Spec.Devices, 32)
	code, _, _ = runCLI("slices", "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs", "--node", "")
	assert.Equal(t, 2, code, "a node name is required")
	code, out, _ = runCLI("deviceclasses", "-o", "yaml")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "name: efa.networking.k8s.aws")
	code, _, _ = runCLI("deviceclasses", "-o", "xml")
	assert.Equal(t, 2, code)
}
