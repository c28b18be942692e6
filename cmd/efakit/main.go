// Command efakit shows the EFA devices and PCIe topology of a machine, live
// or from a capture, and captures machines for later replay.
//
//	efakit list [--sysfs PATH] [-o table|json|yaml]
//	efakit topo [--sysfs PATH] [-o matrix|json]
//	efakit slices [--sysfs PATH] --node NAME [-o json|yaml]
//	efakit deviceclasses [-o json|yaml]
//	efakit snapshot [--sysfs PATH] -o FILE
//	efakit doctor [--sysfs PATH] [--dev DIR] [--node NAME] [-o text|json]
//	efakit version
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: efakit <command> [flags]

commands:
  list       the EFA devices (--sysfs PATH, -o table|json|yaml)
  topo       GPUs, Neuron devices and EFAs: link matrix, affinity, device groups (--sysfs PATH, -o matrix|json)
  slices         the ResourceSlices the DRA plugin publishes (--sysfs PATH, --node NAME, -o json|yaml)
  claims         ResourceClaimTemplates that fit this machine (--sysfs PATH, --groups none|exclusive|mixed)
  deviceclasses  the DeviceClasses the project ships (-o json|yaml)
  snapshot   capture what efakit reads from sysfs into a file (--sysfs PATH, -o FILE)
  doctor     check what makes EFAs work here, on a node or in a pod (--sysfs PATH, --dev DIR, --node NAME, -o text|json)
  version    print the version

--sysfs takes a directory (default /sys) or a capture file.
`

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "list":
		return cmdList(args[1:], stdout, stderr)
	case "topo":
		return cmdTopo(args[1:], stdout, stderr)
	case "slices":
		return cmdSlices(args[1:], stdout, stderr)
	case "claims":
		return cmdClaims(args[1:], stdout, stderr)
	case "deviceclasses":
		return cmdDeviceClasses(args[1:], stdout, stderr)
	case "snapshot":
		return cmdSnapshot(args[1:], stdout, stderr)
	case "doctor":
		return cmdDoctor(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "efakit %s\n", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "efakit: unknown command %q\n%s", args[0], usage)
	return 2
}
