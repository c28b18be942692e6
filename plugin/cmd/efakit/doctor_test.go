package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/doctor"
)

// doctorArgs point every directory of the doctor at an empty temporary
// tree, so that only the sysfs capture, this machine's RDMA netlink and
// memlock limit, and its environment reach the report.
func doctorArgs(t *testing.T, extra ...string) []string {
	dir := t.TempDir()
	args := []string{"doctor", "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs",
		"--dev", filepath.Join(dir, "dev"), "--proc", filepath.Join(dir, "proc"), "--cdi-root", filepath.Join(dir, "cdi"),
		"--kubelet-dir", filepath.Join(dir, "kubelet"), "--metadata-dir", filepath.Join(dir, "metadata"), "--kubeconfig", ""}
	return append(args, extra...)
}

func TestDoctorHelp(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--help", "-h"} {
		code, out, errOut := runCLI("doctor", flag)
		assert.Equal(t, 0, code)
		assert.Empty(t, errOut)
		assert.Contains(t, out, "usage: efakit doctor")
		for _, f := range []string{"-sysfs", "-dev", "-proc", "-cdi-root", "-kubelet-dir", "-metadata-dir", "-driver-name", "-node", "-kubeconfig", "-o"} {
			assert.Contains(t, out, "  "+f+" ", f)
		}
	}
}

func TestDoctorUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"doctor", "-o", "yaml"},
		{"doctor", "--frobnicate"},
		{"doctor", "extra"},
	} {
		code, out, errOut := runCLI(args...)
		assert.Equal(t, 2, code, args)
		assert.Empty(t, out, args)
		assert.NotEmpty(t, errOut, args)
	}
	code, _, errOut := runCLI("doctor", "--sysfs", "/nonexistent")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "/nonexistent")
}

// TestDoctorText: one line per check, the status first, in the library's
// order; no uverbs node here, so the run fails.
func TestDoctorText(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(doctorArgs(t)...)
	assert.Equal(t, 1, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	ids := []doctor.CheckID{doctor.CheckKernelModules, doctor.CheckEFADevices, doctor.CheckPCIeLinks, doctor.CheckGPUDirect, doctor.CheckUverbsNodes, doctor.CheckLibfabricVisibility,
		doctor.CheckRDMANetns, doctor.CheckMemlock, doctor.CheckEnvironment, doctor.CheckFallback, doctor.CheckDeviceMetadata,
		doctor.CheckUnclaimedDevices, doctor.CheckDevicePlugin, doctor.CheckDRADriver, doctor.CheckCDI}
	require.Len(t, lines, len(ids), out)
	for i, l := range lines {
		fields := strings.Fields(l)
		require.GreaterOrEqual(t, len(fields), 3, l)
		assert.Contains(t, []string{"pass", "warn", "fail", "skip"}, fields[0], l)
		assert.Equal(t, string(ids[i]), fields[1], l)
		if fields[0] == "pass" || fields[0] == "skip" {
			assert.NotContains(t, l, " | fix: ", l)
		} else {
			assert.Contains(t, l, " | fix: ", l)
		}
	}
	assert.True(t, strings.HasPrefix(lines[4], "fail  uverbs-nodes  "), lines[4])
	assert.Contains(t, lines[4], "0 of 32 RDMA devices openable")
}

func TestDoctorJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(doctorArgs(t, "-o", "json")...)
	assert.Equal(t, 1, code, errOut)
	var rep doctor.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Checks, 15)
	assert.True(t, rep.Failed())
	c, ok := rep.Check(doctor.CheckEFADevices)
	require.True(t, ok)
	assert.Equal(t, doctor.Pass, c.Status)
	assert.Contains(t, c.Message, "32 EFAs")
}
