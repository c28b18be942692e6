package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/internal/gdrcases"
	"github.com/efakit/efakit/sysfs"
)

// TestTopoGPUDirect runs efakit topo on the P6e case NVIDIA/aicr measured
// (an EFA in no IOMMU group on another root complex than the GPU), written
// to disk as a sysfs directory, with a proc directory beside it.
func TestTopoGPUDirect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := filepath.Join(dir, "sys")
	m := gdrcases.Machine{Product: "p6e-gb300r.36xlarge", EFAID: 0xefa3, NoGroup: true, P2P: "NVIDIA", EFAModule: "2.17.1g", NVIDIA: "595.91.07"}
	require.NoError(t, sysfs.WriteDir(root, m.Build().Entries()))
	proc := filepath.Join(dir, "proc")
	for name, data := range map[string]string{"sys/kernel/osrelease": "6.1.119-129.201.amzn2023.aarch64\n", "driver/nvidia/params": "ModifyDeviceFiles: 1\n"} {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, name), []byte(data), 0o644))
	}

	code, out, errOut := runCLI("topo", "--sysfs", root, "--proc", proc)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "GPU0 0000:9d:00.0  rdmap151s0 0000:97:00.0  NODE  blocked  -")
	assert.Contains(t, out, "GPU0 rdmap151s0, dma-buf nvidia-topology-check: GPU 0000:9d:00.0 (IOMMU group 0, pci0000:98) and EFA 0000:97:00.0 (no IOMMU group, pci0000:84): driver 595.91.07 (R595 and later)")
	assert.Contains(t, out, "peer-memory efa-peer-memory: a Grace (coherent) platform needs dma-buf")

	code, out, errOut = runCLI("topo", "--sysfs", root, "--proc", proc, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var v struct {
		GPUDirect []struct {
			GPUAddress string `json:"gpuAddress"`
			EFAAddress string `json:"efaAddress"`
			Status     string `json:"status"`
			Paths      []struct {
				Method   string `json:"method"`
				Status   string `json:"status"`
				Findings []struct{ Check, Status, Message, Source string }
			} `json:"paths"`
		} `json:"gpuDirect"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Len(t, v.GPUDirect, 1)
	p := v.GPUDirect[0]
	assert.Equal(t, "0000:9d:00.0", p.GPUAddress)
	assert.Equal(t, "0000:97:00.0", p.EFAAddress)
	assert.Equal(t, "blocked", p.Status)
	require.Len(t, p.Paths, 2)
	assert.Equal(t, "dma-buf", p.Paths[0].Method)
	last := p.Paths[0].Findings[len(p.Paths[0].Findings)-1]
	assert.Equal(t, gpudirect.CheckNVIDIATopology, last.Check)
	assert.Equal(t, "blocked", last.Status)
	assert.Contains(t, last.Source, "nv-pci.c")
}

// TestGPUDirectGolden compares efakit topo on each case of
// testdata/gpudirect with testdata/golden/gpudirect/<case>.topo.txt (run
// with -update after a deliberate change, and read the diff).
func TestGPUDirectGolden(t *testing.T) {
	for _, c := range gdrcases.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			code, out, errOut := runCLI("topo", "--sysfs", "../../../testdata/gpudirect/"+c.Name+".sysfs", "--proc", "../../../testdata/gpudirect/"+c.Name+".proc")
			require.Equal(t, 0, code, errOut)
			file := filepath.Join("..", "..", "..", "testdata", "golden", "gpudirect", c.Name+".topo.txt")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
				require.NoError(t, os.WriteFile(file, []byte(out), 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "run go test ./cmd/efakit -run TestGPUDirectGolden -update to create it")
			assert.Equal(t, string(want), out)
		})
	}
}
