package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/internal/placed"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// printObjects prints Kubernetes objects as a JSON list or a YAML stream.
func printObjects[T any](w io.Writer, format string, objs []T) error {
	if format == "json" {
		b, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func cmdSlices(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("slices")
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	node := fl.String("node", os.Getenv("NODE_NAME"), "node `name` (default $NODE_NAME)")
	driverName := fl.String("driver-name", resources.DefaultDriverName, "DRA driver `name`")
	numaList := fl.Bool("numa-list", false, "publish numaNode in list form (clusters with DRAListTypeAttributes)")
	groups := fl.String("groups", "none", "EFA group devices: none, exclusive or mixed")
	sharing := fl.String("sharing", "none", "EFAs shared by independent claims: none or capacity (each EFA --shares shares)")
	shares := fl.Int64("shares", resources.DefaultShares, "shares of each EFA with --sharing=capacity")
	out := fl.String("o", "yaml", "output `format`: json or yaml")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	mode, err := resources.ParseGroupMode(*groups)
	if err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 2
	}
	share, err := resources.ParseSharingMode(*sharing)
	if err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 2
	}
	cfg := resources.Config{DriverName: *driverName, NodeName: *node, NUMAList: *numaList, Groups: mode, Sharing: share, Shares: *shares}
	if err := cfg.CheckSharing(); err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 2
	}
	if *out != "json" && *out != "yaml" {
		fmt.Fprintf(stderr, "efakit slices: unknown output format %q (json, yaml)\n", *out)
		return 2
	}
	if *node == "" {
		fmt.Fprintln(stderr, "efakit slices: --node (or NODE_NAME) is required")
		return 2
	}
	if err := checkNodeName("--node", *node); err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 2
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 1
	}
	defer r.Close()
	printNote(stderr, "efakit slices", r)
	topo, scanErr := placed.Scan(r, false)
	// The same function builds what the plugin publishes.
	pool, buildErr := resources.Published(topo, cfg)
	if err := printObjects(stdout, *out, resources.Slices(pool, cfg)); err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 1
	}
	code := 0
	for _, err := range []error{scanErr, buildErr} {
		if err != nil {
			printErrors(stderr, "efakit slices", err)
			code = 1
		}
	}
	return code
}

func cmdDeviceClasses(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("deviceclasses")
	driverName := fl.String("driver-name", resources.DefaultDriverName, "DRA driver `name`")
	className := fl.String("class-name", resources.DefaultDeviceClass, "DeviceClass `name`")
	extended := fl.String("extended-resource-name", "", "the single-EFA class's extendedResourceName (vpc.amazonaws.com/efa lets pod specs of AWS's EFA device plugin run unchanged; Kubernetes 1.36 or later); none when empty")
	out := fl.String("o", "yaml", "output `format`: json or yaml")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	if *out != "json" && *out != "yaml" {
		fmt.Fprintf(stderr, "efakit deviceclasses: unknown output format %q (json, yaml)\n", *out)
		return 2
	}
	if *extended != "" {
		if msgs := validation.IsQualifiedName(*extended); len(msgs) > 0 || !strings.Contains(*extended, "/") {
			fmt.Fprintf(stderr, "efakit deviceclasses: --extended-resource-name %q: not an extended resource name (domain/name, such as vpc.amazonaws.com/efa)\n", *extended)
			return 2
		}
	}
	classes := resources.DeviceClasses(resources.ClassOptions{DriverName: *driverName, ClassName: *className, ExtendedResourceName: *extended})
	if err := printObjects(stdout, *out, classes); err != nil {
		fmt.Fprintf(stderr, "efakit deviceclasses: %v\n", err)
		return 1
	}
	return 0
}

const claimsHelp = `Prints the ResourceClaimTemplates that fit this machine, one YAML document
each, with a comment saying why it has its counts and how many claims of it
one node holds. The output is safe to apply: templates allocate nothing
until a pod uses them. --example-pods adds a pod that takes the whole node,
marked as an example: applied as printed, it would hold every EFA of a node
while its placeholder image fails to pull.
`

// examplePodNote comes before every example pod claims prints.
const examplePodNote = `# EXAMPLE POD (--example-pods): do not apply as printed. Its image, %s,
# is a placeholder; the pod holds every EFA of its node from scheduling
# until it is deleted, even while the image fails to pull. Put your
# workload in it, or copy its resourceClaims into your own pod.
`

func cmdClaims(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("claims")
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	groups := fl.String("groups", "none", "the node's group `mode`: none, exclusive or mixed")
	className := fl.String("class-name", resources.DefaultDeviceClass, "the single-EFA DeviceClass")
	examplePods := fl.Bool("example-pods", false, "also print an example pod that takes the whole node (not to apply as printed)")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	mode, err := resources.ParseGroupMode(*groups)
	if err != nil {
		fmt.Fprintf(stderr, "efakit claims: %v\n", err)
		return 2
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit claims: %v\n", err)
		return 1
	}
	defer r.Close()
	printNote(stderr, "efakit claims", r)
	topo, scanErr := placed.Scan(r, false)
	tms, pod := resources.ClaimTemplates(topo, mode, *className)
	if len(tms) == 0 {
		fmt.Fprintln(stdout, "# no EFA on this machine: no claims to suggest")
	}
	for i, tm := range tms {
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		fmt.Fprintf(stdout, "# %s (%d per node)\n", tm.Comment, tm.PerNode)
		if err := printObjects(stdout, "yaml", []any{tm.Template}); err != nil {
			fmt.Fprintf(stderr, "efakit claims: %v\n", err)
			return 1
		}
	}
	// The example pod holds every EFA of the node for as long as it
	// exists, even while its placeholder image fails to pull: only on
	// request, and marked, so that applying the output is safe.
	if pod != nil && *examplePods {
		fmt.Fprintf(stdout, "---\n"+examplePodNote+"# %s\n", pod.Pod.Spec.Containers[0].Image, pod.Comment)
		if err := printObjects(stdout, "yaml", []any{pod.Pod}); err != nil {
			fmt.Fprintf(stderr, "efakit claims: %v\n", err)
			return 1
		}
	}
	if scanErr != nil {
		printErrors(stderr, "efakit claims", scanErr)
		return 1
	}
	return 0
}
