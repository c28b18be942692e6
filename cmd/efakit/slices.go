package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/driver"
	"github.com/efakit/efakit/pcie"
	"github.com/efakit/efakit/sysfs"
	"github.com/efakit/efakit/topology"
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
	fl := flag.NewFlagSet("slices", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	node := fl.String("node", os.Getenv("NODE_NAME"), "node `name` (default $NODE_NAME)")
	driverName := fl.String("driver-name", driver.DefaultDriverName, "DRA driver `name`")
	numaList := fl.Bool("numa-list", false, "publish numaNode in list form (clusters with DRAListTypeAttributes)")
	groups := fl.String("groups", "none", "EFA group devices: none, exclusive or mixed")
	out := fl.String("o", "yaml", "output `format`: json or yaml")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	mode, err := driver.ParseGroupMode(*groups)
	if err != nil {
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
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit slices: %v\n", err)
		return 1
	}
	defer r.Close()
	topo, scanErr := topology.Scan(r)
	names, _ := pcie.LoadNames()
	cfg := driver.Config{DriverName: *driverName, NodeName: *node, NUMAList: *numaList, Groups: mode}
	res, buildErr := driver.PublishedResources(topo, names, cfg)
	if err := printObjects(stdout, *out, driver.Slices(res, cfg)); err != nil {
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
	fl := flag.NewFlagSet("deviceclasses", flag.ContinueOnError)
	fl.SetOutput(stderr)
	driverName := fl.String("driver-name", driver.DefaultDriverName, "DRA driver `name`")
	className := fl.String("class-name", driver.DefaultDeviceClass, "DeviceClass `name`")
	out := fl.String("o", "yaml", "output `format`: json or yaml")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *out != "json" && *out != "yaml" {
		fmt.Fprintf(stderr, "efakit deviceclasses: unknown output format %q (json, yaml)\n", *out)
		return 2
	}
	if err := printObjects(stdout, *out, driver.DeviceClasses(*driverName, *className)); err != nil {
		fmt.Fprintf(stderr, "efakit deviceclasses: %v\n", err)
		return 1
	}
	return 0
}

func cmdClaims(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("claims", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	groups := fl.String("groups", "none", "the node's group `mode`: none, exclusive or mixed")
	className := fl.String("class-name", driver.DefaultDeviceClass, "the single-EFA DeviceClass")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	mode, err := driver.ParseGroupMode(*groups)
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
	topo, scanErr := topology.Scan(r)
	tms, pod := driver.ClaimTemplates(topo, mode, *className)
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
	if pod != nil {
		fmt.Fprintf(stdout, "---\n# %s\n", pod.Comment)
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
