package doctor

import (
	"fmt"
	"os"
	"strings"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
)

// fixGPUDirect points at the full answer: every pair and finding.
const fixGPUDirect = "efakit topo --proc /proc -o json lists every pair's findings with their sources; docs/operations.md, \"GPUDirect readiness\", says what to change for each"

// gpuDirect judges each GPU with its closest EFAs (gpudirect.Assess): pass
// when every pair is ready, warn when one is blocked or slowed by ACS,
// skip when the facts to judge are missing. Its messages name the first
// pair of each finding.
func (f *facts) gpuDirect() Check {
	if len(f.gpus) == 0 || len(f.efas) == 0 {
		return Check{ID: CheckGPUDirect, Status: Skip, Message: "no GPU with an EFA"}
	}
	topo, _ := topology.Scan(f.o.Sysfs) // its errors are efa-devices'
	r := sysfs.NewReader(f.o.Sysfs)
	node, _ := gpudirect.ReadNode(r, os.DirFS(f.o.ProcDir)) // a file not read is a fact unknown, in the findings
	pairs, _ := gpudirect.Assess(r, topo, node)
	_ = gpudirect.ReadACS(r, pairs) // a port not read is ACS unknown, in the findings
	if len(pairs) == 0 {
		return Check{ID: CheckGPUDirect, Status: Skip, Message: "no GPU has an EFA among its closest devices"}
	}
	count := map[gpudirect.Status]int{}
	for _, p := range pairs {
		count[p.Status]++
	}
	summary := fmt.Sprintf("%s: %d ready", plural(len(pairs), "GPU-EFA pair"), count[gpudirect.Ready])
	for _, s := range []gpudirect.Status{gpudirect.Slow, gpudirect.Unknown, gpudirect.Blocked} {
		if count[s] > 0 {
			summary += fmt.Sprintf(", %d %s", count[s], s)
		}
	}
	if count[gpudirect.Ready] == len(pairs) {
		return Check{ID: CheckGPUDirect, Status: Pass, Message: summary + " (" + methods(pairs) + ")"}
	}
	var parts []part
	parts = append(parts, part{Pass, summary, ""})
	seen := map[string]bool{}
	for _, p := range pairs {
		if p.Status == gpudirect.Ready {
			continue
		}
		status := Warn
		if p.Status == gpudirect.Unknown {
			status = Skip
		}
		for _, x := range p.Paths {
			for _, fd := range x.Findings {
				key := string(x.Method) + " " + fd.Check
				if fd.Status == gpudirect.Ready || seen[key] {
					continue
				}
				seen[key] = true
				parts = append(parts, part{status, fmt.Sprintf("%s-%s %s: %s", p.GPU.Name, p.EFA.Name, key, fd.Message), fixGPUDirect})
			}
		}
		if p.ACS != nil && p.ACS.Status == gpudirect.Slow && !seen["acs"] {
			seen["acs"] = true
			parts = append(parts, part{Warn, fmt.Sprintf("%s-%s: %s", p.GPU.Name, p.EFA.Name, p.ACS.Message), fixGPUDirect})
		}
	}
	return combine(CheckGPUDirect, parts...)
}

// methods names the paths that make the pairs ready: "peer-memory" or
// "dma-buf, peer-memory".
func methods(pairs []gpudirect.Pair) string {
	seen := map[gpudirect.Method]bool{}
	var out []string
	for _, p := range pairs {
		for _, m := range p.Ready() {
			if !seen[m] {
				seen[m] = true
				out = append(out, string(m))
			}
		}
	}
	return "ready by " + strings.Join(out, ", ")
}
