package doctor

import (
	"fmt"
	"os"
	"strings"

	"github.com/efakit/efakit/gpudirect"
	"github.com/efakit/efakit/host"
	"github.com/efakit/efakit/internal/sysread"
	"github.com/efakit/efakit/topology"
)

// fixGPUDirect points at the full answer: every pair and finding.
const fixGPUDirect = "efakit topo --proc /proc -o json lists every pair's findings with their sources; docs/operations.md, \"GPUDirect readiness\", says what to change for each"

// gpuDirect judges each GPU with its closest EFAs (gpudirect.Judge): pass
// when every pair is ready, warn when one is blocked or slowed by ACS,
// skip when the facts to judge are missing. Its messages name the first
// pair of each finding.
func (f *facts) gpuDirect() Check {
	if len(f.gpus) == 0 || len(f.efas) == 0 {
		return Check{ID: CheckGPUDirect, Status: Skip, Message: "no GPU with an EFA"}
	}
	// The topology of the tree and EFAs efa.Scan found: the judgement
	// needs only GPUs, EFAs and the instance type, so no Neuron class.
	r := sysread.New(f.o.Sysfs)
	h, _ := host.Read(r) // the instance type; a damaged file leaves it unknown
	topo := topology.Build(f.tree, f.efaRes, h, nil)
	// A file not read is a fact unknown, in the findings.
	pairs, _, _ := gpudirect.Judge(r, topo, os.DirFS(f.o.ProcDir))
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
	parts := []part{{Pass, summary, ""}}
	for _, b := range gpudirect.Blockers(pairs) {
		name := b.Pair.GPU.Name + "-" + b.Pair.EFA.Name
		switch {
		case b.Finding.Check == gpudirect.CheckACS && b.Finding.Status == gpudirect.Slow:
			parts = append(parts, part{Warn, fmt.Sprintf("%s: %s", name, b.Finding.Message), fixGPUDirect})
		case b.Finding.Check == gpudirect.CheckACS:
			// ACS unknown: speed, not readiness, and topo says it
		default:
			status := Warn
			if b.Pair.Status == gpudirect.Unknown {
				status = Skip
			}
			parts = append(parts, part{status, fmt.Sprintf("%s %s: %s", name, b.Key, b.Finding.Message), fixGPUDirect})
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
		for _, m := range p.ReadyBy() {
			if !seen[m] {
				seen[m] = true
				out = append(out, string(m))
			}
		}
	}
	s := "ready by " + strings.Join(out, ", ")
	// Pairs beyond PXB that NCCL uses through aws-ofi-nccl's topology
	// file: which file.
	for _, p := range pairs {
		if p.NCCL != nil && p.NCCL.Status == gpudirect.Ready && p.Link > topology.LinkPXB {
			s += "; NCCL: " + p.NCCL.Message
			break
		}
	}
	return s
}
