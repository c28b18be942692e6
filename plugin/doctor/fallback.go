package doctor

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/plugin/cdi"
	"github.com/efakit/efakit/topology"
)

// What NCCL and libfabric do with this process's environment and files,
// read from their sources:
//   - NCCL loads its network plugin with dlopen: "libnccl-net.so", or with
//     NCCL_NET_PLUGIN set, that name itself and then
//     "libnccl-net-<NCCL_NET_PLUGIN>.so" (NVIDIA/nccl src/plugin/net.cc).
//     Without a plugin it uses its internal transports: IB verbs, which
//     need reliable-connected queue pairs an EFA does not have, then TCP
//     sockets. The EFA installer ships aws-ofi-nccl as libnccl-net-ofi.so
//     in /opt/amazon/ofi-nccl/lib, so NCCL_NET_PLUGIN=ofi must be set.
//   - aws-ofi-nccl's plugin is named "Libfabric" ("AWS Libfabric" in older
//     releases): NCCL_NET must be unset or name it.
//   - NCCL turns GPUDirect RDMA off for a GPU-NIC path farther than PXB
//     unless NCCL_NET_GDR_LEVEL allows it (src/graph/paths.cc,
//     ncclTopoCheckGdr). aws-ofi-nccl loads a topology file of its own
//     for p4d.24xlarge, p4de.24xlarge and g5.48xlarge, which declares the
//     PCIe switch each GPU shares with its NIC, only when NCCL_TOPO_FILE is
//     unset (topology/*-topo.xml, nccl_ofi_topo.c).

// pluginDirs are where the dynamic loader looks besides LD_LIBRARY_PATH:
// the directories /etc/ld.so.conf names (ldconfig's cache), and the
// defaults.
var defaultLibDirs = []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib"}

// platformTopo are the instance types aws-ofi-nccl ships a topology file
// for, and the file.
var platformTopo = map[string]string{
	"p4d.24xlarge":  "p4d-24xl-topo.xml",
	"p4de.24xlarge": "p4de-24xl-topo.xml",
	"g5.48xlarge":   "g5.48xl-topo.xml",
}

// fallback says whether libfabric or NCCL would leave the container's EFAs
// for TCP, and why: each finding with its fix.
func (f *facts) fallback() Check {
	if f.o.Place == OnNode {
		return Check{ID: CheckFallback, Status: Skip, Message: "on a node: a container's environment and libraries decide (run efakit doctor in the pod)"}
	}
	held := rdmaNames(f.openable(true))
	var parts []part

	// libfabric.
	if prov, set := f.env[cdi.EnvProvider]; set && !providerAllowsEFA(prov) {
		parts = append(parts, part{Fail, fmt.Sprintf("FI_PROVIDER=%s: libfabric will not use EFA, and NCCL or MPI over it uses TCP", prov), "unset FI_PROVIDER, or set it to efa"})
	}
	switch iface, set := f.env[cdi.EnvIface]; {
	case len(held) == 0:
		parts = append(parts, part{Fail, "this container can open no EFA: libfabric's EFA provider finds none, and NCCL uses TCP sockets",
			"give the container EFAs through a ResourceClaim of efakit's DeviceClass (uverbs-nodes says what it holds)"})
	case set && strings.TrimSpace(iface) != "all" && !slices.ContainsFunc(splitList(iface, ","), func(n string) bool { return slices.Contains(held, n) }):
		parts = append(parts, part{Fail, fmt.Sprintf("FI_EFA_IFACE=%s names no EFA this container can open: libfabric's EFA provider finds none, and NCCL uses TCP sockets", iface),
			fmt.Sprintf("unset FI_EFA_IFACE, or name the EFAs this container holds: %s", strings.Join(held, ","))})
	}
	if visible, can := len(f.verbs), len(f.openable(false)); can > 0 && visible > can {
		parts = append(parts, part{Warn, fmt.Sprintf("%d RDMA devices in sysfs cannot be opened here: a libfabric without PR 12744 (ofiwg/libfabric issue 12708) then fails its whole EFA provider (fi_getinfo -61), and NCCL uses TCP sockets", visible-can),
			"use a libfabric with PR 12744 (libfabric-visibility says more)"})
	}

	// NCCL.
	if v, set := f.env["NCCL_NET"]; set {
		switch name := strings.TrimSpace(v); {
		case strings.EqualFold(name, "Libfabric") || strings.EqualFold(name, "AWS Libfabric"):
			parts = append(parts, part{Pass, fmt.Sprintf("NCCL_NET=%s: aws-ofi-nccl's plugin", name), ""})
		case strings.EqualFold(name, "Socket"):
			parts = append(parts, part{Fail, "NCCL_NET=Socket: NCCL uses TCP sockets", "unset NCCL_NET (or set it to Libfabric)"})
		case strings.EqualFold(name, "IB"):
			parts = append(parts, part{Fail, "NCCL_NET=IB: NCCL's own InfiniBand verbs transport, which needs reliable-connected queue pairs an EFA does not have",
				"unset NCCL_NET (or set it to Libfabric)"})
		default:
			parts = append(parts, part{Warn, fmt.Sprintf("NCCL_NET=%s: no network NCCL uses on EFA", name), "unset NCCL_NET (or set it to Libfabric)"})
		}
	}
	parts = append(parts, f.ncclPlugin())
	parts = append(parts, f.gdrLevel(held)...)
	return combine(CheckFallback, parts...)
}

// ncclPlugin says which network plugin NCCL would load here, if any.
func (f *facts) ncclPlugin() part {
	want := []string{"libnccl-net.so"}
	v, set := f.env["NCCL_NET_PLUGIN"]
	v = strings.TrimSpace(v)
	if set && v != "" {
		if strings.EqualFold(v, "none") {
			// No such library: whether NCCL reads "none" as a word or
			// as a name, it loads no plugin.
			return part{Fail, "NCCL_NET_PLUGIN=none: NCCL loads no network plugin and uses TCP sockets on EFA", "unset NCCL_NET_PLUGIN, or set it to ofi (the EFA installer's aws-ofi-nccl)"}
		}
		want = []string{v, "libnccl-net-" + v + ".so"}
	}
	dirs := f.libDirs()
	for _, name := range want {
		if strings.Contains(name, "/") {
			if fileExists(f.o.Files, name) {
				return part{Pass, "NCCL loads its network plugin " + name, ""}
			}
			continue
		}
		for _, d := range dirs {
			if p := path.Join(d, name); fileExists(f.o.Files, p) {
				return part{Pass, "NCCL loads its network plugin " + p, ""}
			}
		}
	}
	fix := "install aws-ofi-nccl (the EFA installer puts libnccl-net-ofi.so in /opt/amazon/ofi-nccl/lib), set NCCL_NET_PLUGIN=ofi and add its directory to LD_LIBRARY_PATH"
	if found := f.findPlugins(dirs); len(found) > 0 {
		fix = fmt.Sprintf("set NCCL_NET_PLUGIN to the plugin here (%s: NCCL_NET_PLUGIN=%s)", found[0], pluginShortName(found[0]))
	}
	return part{Warn, fmt.Sprintf("NCCL would load no network plugin: %s is in none of the loader's directories (%s); NCCL then uses TCP sockets on EFA",
		strings.Join(want, " or "), listNames(dirs, 6)), fix}
}

// libDirs are the dynamic loader's directories: LD_LIBRARY_PATH's, then
// /etc/ld.so.conf's (with its includes), then the defaults.
func (f *facts) libDirs() []string {
	var out []string
	add := func(d string) {
		d = path.Clean(d)
		if strings.HasPrefix(d, "/") && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	for _, d := range splitList(f.env["LD_LIBRARY_PATH"], ":") {
		add(d)
	}
	var conf func(name string, depth int)
	conf = func(name string, depth int) {
		b, err := fs.ReadFile(f.o.Files, strings.TrimPrefix(name, "/"))
		if err != nil || depth > 4 {
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = strings.TrimSpace(l[:i])
			}
			switch {
			case l == "":
			case strings.HasPrefix(l, "include "):
				pattern := strings.TrimSpace(strings.TrimPrefix(l, "include "))
				if !strings.HasPrefix(pattern, "/") {
					pattern = path.Join(path.Dir(name), pattern)
				}
				matches, _ := fs.Glob(f.o.Files, strings.TrimPrefix(pattern, "/"))
				for _, m := range matches {
					conf("/"+m, depth+1)
				}
			default:
				add(l)
			}
		}
	}
	conf("/etc/ld.so.conf", 0)
	for _, d := range defaultLibDirs {
		add(d)
	}
	return out
}

// findPlugins lists the NCCL network plugins in dirs: libnccl-net*.so.
func (f *facts) findPlugins(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		m, _ := fs.Glob(f.o.Files, strings.TrimPrefix(path.Join(d, "libnccl-net*.so"), "/"))
		for _, p := range m {
			out = append(out, "/"+p)
		}
	}
	return out
}

// pluginShortName is what NCCL_NET_PLUGIN names a plugin file by:
// libnccl-net-ofi.so is "ofi".
func pluginShortName(p string) string {
	base := path.Base(p)
	if s, ok := strings.CutPrefix(base, "libnccl-net-"); ok {
		return strings.TrimSuffix(s, ".so")
	}
	return p
}

func fileExists(fsys fs.FS, name string) bool {
	fi, err := fs.Stat(fsys, strings.TrimPrefix(path.Clean(name), "/"))
	return err == nil && !fi.IsDir()
}

// gdrLevels are NCCL_NET_GDR_LEVEL's values, nearest first, each also
// accepted as its index (NCCL's legacy integers), with the farthest
// topology link each allows.
var gdrLevels = []struct {
	name string
	link topology.Link
}{{"LOC", topology.LinkSelf}, {"PIX", topology.LinkPIX}, {"PXB", topology.LinkPXB}, {"PHB", topology.LinkPHB}, {"SYS", topology.LinkSys}}

// gdrLevel says which of the GPU-EFA pairs of the container's EFAs NCCL
// keeps GPUDirect RDMA off for: those farther than PXB, unless
// NCCL_NET_GDR_LEVEL or a topology file says otherwise.
func (f *facts) gdrLevel(held []string) []part {
	if len(f.gpus) == 0 || len(held) == 0 {
		return nil
	}
	r := sysread.New(f.o.Sysfs)
	h, _ := host.Read(r)
	topo := topology.Build(f.tree, f.efaRes, h, nil)
	allowed, by := topology.LinkPXB, "NCCL's default GDR level, PXB"
	if v, set := f.env["NCCL_NET_GDR_LEVEL"]; set {
		for i, l := range gdrLevels {
			if strings.EqualFold(strings.TrimSpace(v), l.name) || strings.TrimSpace(v) == fmt.Sprint(i) {
				allowed, by = l.link, "NCCL_NET_GDR_LEVEL="+v
			}
		}
	}
	// NCCL pairs each GPU with its closest NICs.
	var far []string
	for _, gpu := range topo.Of(topology.KindGPU) {
		for _, e := range topo.Closest(gpu) {
			if l := topo.Link(gpu, e); e.Kind == topology.KindEFA && slices.Contains(held, e.Name) && l > allowed {
				far = append(far, fmt.Sprintf("%s-%s %s", gpu.Name, e.Name, l))
			}
		}
	}
	if len(far) == 0 {
		return nil
	}
	instance := ""
	if h != nil {
		instance = h.InstanceType
	}
	file, platform := platformTopo[instance]
	userTopo, userSet := f.env["NCCL_TOPO_FILE"]
	switch {
	case platform && !userSet:
		return []part{{Pass, fmt.Sprintf("%s beyond %s: aws-ofi-nccl's topology file for %s (%s) declares the PCIe switch each GPU shares with its EFA, so NCCL keeps GPUDirect RDMA on",
			plural(len(far), "GPU-EFA pair"), by, instance, file), ""}}
	case platform:
		return []part{{Warn, fmt.Sprintf("%s beyond %s (%s), and NCCL_TOPO_FILE=%s replaces aws-ofi-nccl's %s: NCCL keeps GPUDirect RDMA off for them unless that file declares their switch",
			plural(len(far), "GPU-EFA pair"), by, listNames(far, 2), userTopo, file),
			"unset NCCL_TOPO_FILE (aws-ofi-nccl then loads its own), or set NCCL_NET_GDR_LEVEL=PHB"}}
	}
	return []part{{Warn, fmt.Sprintf("%s beyond %s (%s): NCCL stages their GPU memory through the host (GPUDirect RDMA off)", plural(len(far), "GPU-EFA pair"), by, listNames(far, 2)),
		"set NCCL_NET_GDR_LEVEL to the pairs' level (efakit topo shows it), or give NCCL a topology file (NCCL_TOPO_FILE) that declares their switch"}}
}
