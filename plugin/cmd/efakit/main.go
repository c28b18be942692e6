// Command efakit shows the EFA devices and PCIe topology of a machine, live
// or from a capture, and captures machines for later replay.
//
//	efakit list [--sysfs PATH] [-o table|json|yaml]
//	efakit topo [--sysfs PATH] [-o matrix|json]
//	efakit counters [--sysfs PATH] [--device NAME]... [--interval DUR [--count N]] [-o table|json] [--all]
//	efakit slices [--sysfs PATH] --node NAME [--groups none|exclusive|mixed] [-o json|yaml]
//	efakit claims [--sysfs PATH] [--groups none|exclusive|mixed] [--example-pods]
//	efakit deviceclasses [-o json|yaml]
//	efakit snapshot [--sysfs PATH] -o FILE
//	efakit doctor [--sysfs PATH] [--dev DIR] [--node NAME] [-o text|json]
//	efakit explain --pod NAMESPACE/NAME [--kubeconfig FILE]
//	efakit version
//	efakit help [COMMAND]
//
// Every command takes --help (its flags, on standard output, exit 0) and no
// arguments beyond its flags; a usage error exits 2.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/util/validation"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one efakit subcommand.
type command struct {
	name  string
	about string // one line: what it does
	flags string // the flags that matter most, for the overview
	// help is the longer description of `efakit <name> --help`; about
	// when empty.
	help string
	run  func(args []string, stdout, stderr io.Writer) int
}

// commands lists every subcommand: run dispatches through it, and the
// overview and each command's --help are printed from it.
func commands() []command {
	return []command{
		{name: "list", about: "the EFA devices", flags: "--sysfs PATH, -o table|json|yaml", run: cmdList},
		{name: "topo", about: "GPUs, Neuron devices and EFAs: link matrix, affinity, device groups",
			flags: "--sysfs PATH, -o matrix|json", run: cmdTopo},
		{name: "counters", about: "the EFAs' hardware counters, or their rates per second",
			flags: "--sysfs PATH, --device NAME, --interval DUR, --count N, -o table|json, --all", run: cmdCounters,
			help: countersHelp},
		{name: "slices", about: "the ResourceSlices the DRA plugin publishes",
			flags: "--sysfs PATH, --node NAME, --groups none|exclusive|mixed, -o json|yaml", run: cmdSlices},
		{name: "claims", about: "ResourceClaimTemplates that fit this machine",
			flags: "--sysfs PATH, --groups none|exclusive|mixed, --example-pods", run: cmdClaims,
			help: claimsHelp},
		{name: "deviceclasses", about: "the DeviceClasses the project ships", flags: "-o json|yaml", run: cmdDeviceClasses},
		{name: "snapshot", about: "capture what efakit reads from sysfs into a file", flags: "--sysfs PATH, -o FILE, --unpack DIR",
			run: cmdSnapshot},
		{name: "doctor", about: "check what makes EFAs work here, on a node or in a pod",
			flags: "--sysfs PATH, --dev DIR, --node NAME, -o text|json", run: cmdDoctor, help: doctorHelp},
		{name: "explain", about: "why a pod with EFA claims is pending: what the nodes it may run on publish",
			flags: "--pod NAMESPACE/NAME, --kubeconfig FILE", run: cmdExplain, help: explainHelp},
		{name: "version", about: "print the version", run: cmdVersion},
		{name: "help", about: "this text, or a command's flags (efakit help COMMAND)", run: cmdHelp},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// writeUsage prints the overview: every command, what it does aligned in
// one column, its main flags on the line below.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, "usage: efakit <command> [flags]\n\ncommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.about)
		if c.flags != "" {
			fmt.Fprintf(tw, "  \t%s\n", c.flags)
		}
	}
	tw.Flush()
	fmt.Fprint(w, "\n--sysfs takes a directory (default /sys) or a capture file.\n"+
		"efakit <command> --help lists a command's flags.\n")
}

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help":
		writeUsage(stdout)
		return 0
	}
	if c, ok := lookup(args[0]); ok {
		return c.run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "efakit: unknown command %q\n", args[0])
	writeUsage(stderr)
	return 2
}

// newFlags returns the flag set of a command. It prints nothing itself:
// parseFlags prints the usage where it belongs.
func newFlags(name string) *flag.FlagSet {
	fl := flag.NewFlagSet(name, flag.ContinueOnError)
	fl.Usage = func() {}
	return fl
}

// parseFlags parses the arguments of a command, which are flags only. When
// ok is false the command ends with code: 0 after --help, with the usage on
// stdout; 2 after a usage error (a bad flag, an argument beyond the flags),
// with the error and the usage on stderr.
func parseFlags(fl *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fl.SetOutput(stderr) // the flag package's own message for a bad flag
	err := fl.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeCommandUsage(stdout, fl)
		return 0, false
	case err != nil:
		writeCommandUsage(stderr, fl)
		return 2, false
	case fl.NArg() > 0:
		fmt.Fprintf(stderr, "efakit %s: unexpected argument %q (flags only)\n", fl.Name(), fl.Arg(0))
		writeCommandUsage(stderr, fl)
		return 2, false
	}
	return 0, true
}

// writeCommandUsage prints a command's usage line, what it does and its
// flags.
func writeCommandUsage(w io.Writer, fl *flag.FlagSet) {
	c, _ := lookup(fl.Name())
	help := c.help
	if help == "" {
		help = strings.ToUpper(c.about[:1]) + c.about[1:] + ".\n"
	}
	fmt.Fprintf(w, "usage: efakit %s [flags]\n\n%s", fl.Name(), help)
	var n int
	fl.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nflags:\n")
	out := fl.Output()
	fl.SetOutput(w)
	fl.PrintDefaults()
	fl.SetOutput(out)
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if code, ok := parseFlags(newFlags("version"), args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintf(stdout, "efakit %s\n", version)
	return 0
}

// cmdHelp prints the overview, or with a command's name that command's
// usage.
func cmdHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		writeUsage(stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintf(stderr, "efakit help: unexpected argument %q (one command at most)\n", args[1])
		writeUsage(stderr)
		return 2
	}
	c, ok := lookup(args[0])
	switch {
	case args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || c.name == "help":
		writeUsage(stdout)
		return 0
	case !ok:
		fmt.Fprintf(stderr, "efakit help: unknown command %q\n", args[0])
		writeUsage(stderr)
		return 2
	}
	return c.run([]string{"--help"}, stdout, stderr)
}

// checkNodeName refuses a node name the API would refuse (a Node's name is
// a DNS-1123 subdomain), so that nothing is printed or published under it.
func checkNodeName(flagName, name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%s %q is not a valid node name: %s", flagName, name, strings.Join(msgs, "; "))
	}
	return nil
}
