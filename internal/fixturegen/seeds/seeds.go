// Package seeds makes the small captures that the pipeline fuzz targets
// (topology, driver, snapshot) start from: three machines of a few devices
// each, shaped like the fixtures, written as version 1 captures. A v1
// capture has no end marker, whose SHA-256 would turn almost every
// mutation into a checksum error before any reader sees it. Files no
// reader needs (counters, remove, enable) are left out, so that a seed is
// a few kilobytes and the fuzzer runs thousands of inputs a second.
package seeds

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"github.com/efakit/efakit/internal/fakesys"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
)

// captureV1 is the first line of a capture without an end marker.
const captureV1 = "efakit-sysfs-capture v1"

// Captures returns the seeds by name: flat (g5: a GPU, an EFA and its ENA
// on one root bus, no NUMA), switch (p5: EFAs and GPUs behind a PCIe
// switch and beside it on two NUMA nodes, an EFA function without an RDMA
// device, an NVSwitch) and trn1 (two Neuron devices and their EFA at the
// family table's addresses, one EFA the table gives no Neuron device).
func Captures() (map[string]string, error) {
	out := map[string]string{}
	for name, b := range map[string]*fakesys.Builder{"flat": flat(), "switch": pcieSwitch(), "trn1": trn1()} {
		s, err := v1(b, name == "flat")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
}

// v1 writes b as a version 1 capture, without the files no reader needs
// and, unless ids, without the PCI ID files that uevent repeats (their
// reader is the fallback for a function without uevent).
func v1(b *fakesys.Builder, ids bool) (string, error) {
	var es []sysfs.Entry
	for _, e := range b.Entries() {
		if !unread(e.Path) && (ids || e.Kind != sysfs.KindFile || !idFile(e.Path)) {
			es = append(es, e)
		}
	}
	var buf bytes.Buffer
	if err := sysfs.WriteCapture(&buf, nil, es); err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[len(lines)-1], "end ") {
		return "", fmt.Errorf("no end marker to drop: %q", lines[len(lines)-1])
	}
	lines[0] = captureV1
	return strings.Join(lines[:len(lines)-1], "\n") + "\n", nil
}

// unread reports a file that neither efakit nor snapshot reads.
func unread(p string) bool {
	base := p[strings.LastIndex(p, "/")+1:]
	switch base {
	case "remove", "enable", "modalias", "iommu_group", "subsystem":
		return true
	}
	return strings.Contains(p, "/hw_counters") || strings.HasPrefix(p, "kernel/iommu_groups")
}

// idFile reports a PCI function's ID file, which uevent repeats.
func idFile(p string) bool {
	dir, base := path.Split(p)
	switch base {
	case "vendor", "device", "subsystem_vendor", "subsystem_device", "class":
		_, err := pcie.ParseAddress(path.Base(dir))
		return err == nil
	}
	return false
}

func fn(b *fakesys.Builder, addr, parent string, numa int, vendor, device uint16, class uint32, driver string) {
	cpus := "0-3"
	if numa >= 0 {
		cpus = fmt.Sprintf("%d-%d", 2*numa, 2*numa+1)
	}
	b.AddPCI(fakesys.PCI{Addr: addr, Parent: parent, Vendor: vendor, Device: device, Class: class, Driver: driver, NUMA: numa, CPUs: cpus})
}

func efa(b *fakesys.Builder, addr, name, gid, p2p string) {
	b.AddEFA(fakesys.EFA{Addr: addr, IBName: name, Rate: "100 Gb/sec (4X EDR)", NodeGUID: "cd77:f833:0000:1001", GID: gid, P2P: p2p})
}

const noGID = "fe80:0000:0000:0000:0000:0000:0000:0000"

func flat() *fakesys.Builder {
	b := fakesys.New()
	b.Product("g5.8xlarge")
	b.NUMANodes(10, "0-3")
	fn(b, "0000:00:05.0", "", -1, 0x1d0f, 0xec20, 0x020000, "ena")
	b.AddNetdev("0000:00:05.0", "ens5", "02:07:0e:4a:00:01")
	fn(b, "0000:00:06.0", "", -1, 0x1d0f, 0xefa1, 0x020000, "efa")
	fn(b, "0000:00:1e.0", "", -1, 0x10de, 0x2237, 0x030200, "nvidia")
	efa(b, "0000:00:06.0", "efa_0", "fe80:0000:0000:0000:0007:0eff:fe4a:0001", "")
	return b
}

func pcieSwitch() *fakesys.Builder {
	b := fakesys.New()
	b.Product("p5.48xlarge")
	b.NUMANodes(32, "0-1", "2-3")
	br := func(addr, parent string, numa int) { fn(b, addr, parent, numa, 0x1d0f, 0x0200, 0x060400, "pcieport") }
	br("0000:44:00.0", "", 0)
	br("0000:45:00.0", "0000:44:00.0", 0)
	br("0000:46:01.0", "0000:45:00.0", 0)
	br("0000:46:02.0", "0000:45:00.0", 0)
	fn(b, "0000:47:00.0", "0000:46:01.0", 0, 0x1d0f, 0xefa1, 0x020000, "efa")
	fn(b, "0000:48:00.0", "0000:46:02.0", 0, 0x10de, 0x2330, 0x030200, "nvidia")
	fn(b, "0000:55:00.0", "", 1, 0x1d0f, 0xefa1, 0x020000, "efa")
	fn(b, "0000:55:01.0", "", 1, 0x1d0f, 0xefa1, 0x020000, "") // no driver: inactive
	fn(b, "0000:55:02.0", "", 1, 0x10de, 0x2330, 0x030200, "nvidia")
	fn(b, "0000:e0:00.0", "", 1, 0x10de, 0x22a3, 0x068000, "nvidia") // NVSwitch
	efa(b, "0000:47:00.0", "rdmap71s0", noGID, "NVIDIA")
	efa(b, "0000:55:00.0", "rdmap85s0", noGID, "NVIDIA")
	return b
}

func trn1() *fakesys.Builder {
	b := fakesys.New()
	b.Product("trn1.32xlarge")
	b.NUMANodes(21, "0-1", "2-3")
	fn(b, "0000:10:19.0", "", 0, 0x1d0f, 0xefa1, 0x020000, "efa")
	fn(b, "0000:10:1a.0", "", 0, 0x1d0f, 0xefa1, 0x020000, "efa")
	fn(b, "0000:10:1b.0", "", 0, 0x1d0f, 0x7164, 0x088000, "neuron-driver")
	fn(b, "0000:10:1e.0", "", 0, 0x1d0f, 0x7164, 0x088000, "neuron-driver")
	efa(b, "0000:10:19.0", "rdmap16s25", noGID, "NEURON")
	efa(b, "0000:10:1a.0", "rdmap16s26", noGID, "NEURON")
	for i, nb := range [][]int{{1}, {0}} {
		b.AddNeuron(fakesys.Neuron{Index: i, CoreCount: 2, Connected: nb, ArchType: "NDv2", Instance: "Trn1", DeviceName: "Trainium1"})
	}
	return b
}
