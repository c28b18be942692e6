package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/dynamic-resource-allocation/api/metadata"

	"github.com/efakit/efakit/plugin/doctor"
	"github.com/efakit/efakit/plugin/driver/resources"
	"github.com/efakit/efakit/sysfs"
)

// doctorTimeout bounds the whole run: the API calls are the only ones that
// can wait, and a doctor that hangs on an unreachable API server helps no
// one.
const doctorTimeout = 30 * time.Second

const doctorHelp = `Checks what makes EFAs work, on a node or inside a pod, and prints one line
per check: pass, warn, fail or skip, the facts found and, when not pass, the
fix. Exit code 0 when no check failed (warnings allowed), 1 when one did.
`

func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("doctor")
	root := fl.String("sysfs", "/sys", "sysfs `root`: a directory or a capture file")
	dev := fl.String("dev", "/dev", "`directory` where /dev/infiniband/uverbsN nodes are looked for")
	proc := fl.String("proc", "/proc", "proc file system `directory` (on a node, the container runtime's memlock limit; in a pod, self/mountinfo and self/status)")
	cdiRoot := fl.String("cdi-root", "/var/run/cdi", "CDI spec `directory`")
	kubeletDir := fl.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root `directory` (device-plugins/, plugins_registry/)")
	metadataDir := fl.String("metadata-dir", metadata.ContainerDir, "DRA device metadata `directory` in a container")
	driverName := fl.String("driver-name", resources.DefaultDriverName, "DRA driver `name`")
	node := fl.String("node", os.Getenv("NODE_NAME"), "node `name` for the API checks (default $NODE_NAME)")
	kubeconfig := fl.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig `file` (default $KUBECONFIG; in-cluster configuration when empty)")
	place := fl.String("place", "auto", "where it runs: `node`, pod, or auto (a pod where the device-metadata directory or KUBERNETES_SERVICE_HOST is there; run on the node through efakit's own plugin pod, say node)")
	out := fl.String("o", "text", "output `format`: text or json")
	if code, ok := parseFlags(fl, args, stdout, stderr); !ok {
		return code
	}
	if *out != "text" && *out != "json" {
		fmt.Fprintf(stderr, "efakit doctor: unknown output format %q (text, json)\n", *out)
		return 2
	}
	if *node != "" {
		if err := checkNodeName("--node", *node); err != nil {
			fmt.Fprintf(stderr, "efakit doctor: %v\n", err)
			return 2
		}
	}
	var where doctor.Place
	switch *place {
	case "auto":
	case string(doctor.OnNode), string(doctor.InPod):
		where = doctor.Place(*place)
	default:
		fmt.Fprintf(stderr, "efakit doctor: unknown place %q (node, pod, auto)\n", *place)
		return 2
	}
	r, err := sysfs.Open(*root)
	if err != nil {
		fmt.Fprintf(stderr, "efakit doctor: %v\n", err)
		return 1
	}
	defer r.Close()
	printNote(stderr, "efakit doctor", r)

	opts := doctor.Options{
		Sysfs:       r,
		DevDir:      *dev,
		ProcDir:     *proc,
		CDIRoot:     *cdiRoot,
		KubeletDir:  *kubeletDir,
		MetadataDir: *metadataDir,
		DriverName:  *driverName,
		NodeName:    *node,
		Place:       where,
	}
	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	opts.Client, opts.NoClientReason = apiClient(ctx, *kubeconfig, os.Getenv, serviceAccountDir)
	rep, err := doctor.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "efakit doctor: %v\n", err)
		return 1
	}
	if *out == "json" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "efakit doctor: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printReport(stdout, rep)
	}
	if rep.Failed() {
		return 1
	}
	return 0
}

// apiClient connects to the API with the kubeconfig, or from inside a
// cluster without one (getenv and saDir: the pod's environment and
// service account). No client is no error: the API checks say why they
// skipped.
func apiClient(ctx context.Context, kubeconfig string, getenv func(string) string, saDir string) (doctor.API, string) {
	ua := "efakit/" + version
	if kubeconfig != "" {
		api, err := apiFromKubeconfig(ctx, kubeconfig, ua)
		if err != nil {
			return nil, err.Error()
		}
		return api, ""
	}
	api, err := apiInCluster(getenv, saDir, ua)
	if err != nil {
		return nil, fmt.Sprintf("no --kubeconfig and no in-cluster configuration (%v)", err)
	}
	return api, ""
}

// printReport prints one line per check: the status first, the check's
// ID, the facts, and the fix when there is one.
func printReport(w io.Writer, rep *doctor.Report) {
	width := 0
	for _, c := range rep.Checks {
		width = max(width, len(c.ID))
	}
	for _, c := range rep.Checks {
		line := fmt.Sprintf("%-4s  %-*s  %s", c.Status, width, c.ID, c.Message)
		if c.Fix != "" {
			line += " | fix: " + c.Fix
		}
		fmt.Fprintln(w, line)
	}
}
