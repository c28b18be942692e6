package main

import (
	"bytes"
	"errors"
	"flag"
	resourceapi "k8s.io/api/resource/v1"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

// runAsMain tells the test binary, started again by runPlugin, to be the
// plugin: main with the arguments after the binary's name.
const runAsMain = "EFAKIT_PLUGIN_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runPlugin runs main in a process of its own, as the DaemonSet does, with
// no cluster around it: none of the variables that point at an API server
// or name the node, unless env sets them.
func runPlugin(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG", "NODE_NAME", "EFA_GROUPS", "DRIVER_NAME":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, runAsMain+"=1"), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the plugin: %v", err)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

// TestFlagsBeforeCluster: without a node name and without any cluster
// configuration, the plugin says the node name is missing (a usage error),
// not that there is no in-cluster configuration: every flag is checked
// before anything reaches for the API.
func TestFlagsBeforeCluster(t *testing.T) {
	t.Parallel()
	code, out, errOut := runPlugin(t, nil, "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs")
	assert.Equal(t, 2, code, errOut)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "--node-name (or NODE_NAME) is required")
	assert.NotContains(t, errOut, "unable to load in-cluster configuration")

	// With every flag right, the next thing is the cluster: here, its
	// missing configuration.
	code, _, errOut = runPlugin(t, nil, "--node-name", "n1", "--sysfs", "../../../testdata/sysfs/p5.48xlarge.sysfs")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "unable to load in-cluster configuration")
}

// TestNodeNameChecked: a node name the API would refuse for a Node (a
// DNS-1123 subdomain), from --node-name or NODE_NAME, stops the plugin
// before it starts.
func TestNodeNameChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--node-name", "Bad_Node!"}},
		{[]string{"NODE_NAME=Bad_Node!"}, nil},
		{nil, []string{"--node-name", strings.Repeat("a", 254)}},
	} {
		code, out, errOut := runPlugin(t, tc.env, tc.args...)
		assert.Equal(t, 2, code, errOut)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "efakit-plugin: --node-name ", tc)
		assert.Contains(t, errOut, " is not a valid node name: ", tc)
		assert.NotContains(t, errOut, "unable to load in-cluster configuration", tc)
	}
}

// TestUsage: --help and -h exit 0 with the usage on stdout; an argument
// beyond the flags, an unknown flag or group mode is a usage error (exit 2,
// on stderr); --version needs no node name.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"--help", "-h"} {
		code, out, errOut := runPlugin(t, nil, h)
		assert.Equal(t, 0, code, h)
		assert.Empty(t, errOut, h)
		assert.True(t, strings.HasPrefix(out, "usage: efakit-plugin [flags]\n"), out)
		assert.Contains(t, out, "\n  -node-name ", h)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--node-name", "n1", "extra"}, `unexpected argument "extra"`},
		{[]string{"--node-name", "n1", "--frobnicate"}, "flag provided but not defined: -frobnicate"},
		{[]string{"--node-name", "n1", "--groups", "all"}, `--groups: unknown group mode "all"`},
		{[]string{"--node-name", "n1", "--groups-node-label", "efakit.io/group mode"}, `--groups-node-label "efakit.io/group mode" is not a label name`},
		{[]string{"--node-name", "n1", "--kube-api-qps", "0"}, "--kube-api-qps 0: must be above 0"},
		{[]string{"--node-name", "n1", "--kube-api-burst", "0"}, "--kube-api-burst 0: must be at least 1"},
	} {
		code, out, errOut := runPlugin(t, nil, tc.args...)
		assert.Equal(t, 2, code, tc.args)
		assert.Empty(t, out, tc.args)
		assert.Contains(t, errOut, tc.msg, tc.args)
		assert.NotContains(t, errOut, "unable to load in-cluster configuration", tc.args)
	}
	code, out, errOut := runPlugin(t, nil, "--version")
	assert.Equal(t, 0, code, errOut)
	assert.Equal(t, "efakit-plugin dev\n", out)
}

// TestKubeAPIRateFromEnv: the API client's rate from KUBE_API_QPS and
// KUBE_API_BURST where no flag sets it, a value that does not parse named
// as a usage error, a flag winning over its variable.
func TestKubeAPIRateFromEnv(t *testing.T) {
	t.Parallel()
	code, _, errOut := runPlugin(t, []string{"KUBE_API_QPS=fifty"}, "--node-name", "n1")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, `efakit-plugin: KUBE_API_QPS="fifty": not a number`)
	code, _, errOut = runPlugin(t, []string{"KUBE_API_BURST=1.5"}, "--node-name", "n1")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, `efakit-plugin: KUBE_API_BURST="1.5": not an integer`)
	// The flag set: the variable is not read; the next thing is the
	// cluster (none here).
	code, _, errOut = runPlugin(t, []string{"KUBE_API_QPS=fifty"}, "--node-name", "n1", "--kube-api-qps", "20")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "unable to load in-cluster configuration")
	code, _, errOut = runPlugin(t, []string{"KUBE_API_QPS=0"}, "--node-name", "n1")
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "--kube-api-qps 0: must be above 0")
}

// TestEveryFlagHasEnv: each of the plugin's flags but --version (klog's
// aside) has an environment variable, which its usage names.
func TestEveryFlagHasEnv(t *testing.T) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	var out bytes.Buffer
	_, code, ok := parseArgs([]string{"--help"}, &out, &out)
	require.False(t, ok)
	require.Equal(t, 0, code)
	env := map[string]string{}
	for _, fe := range flagEnv {
		env[fe.flag] = fe.env
	}
	// Each flag's usage: "  -name type\n    \ttext" up to the next flag.
	n := 0
	for _, block := range strings.Split(out.String(), "\n  -")[1:] {
		name, _, _ := strings.Cut(strings.Fields(block)[0], "\n")
		if klogFlags.Lookup(name) != nil || name == "version" {
			continue
		}
		n++
		if assert.Contains(t, env, name, "--%s has no environment variable", name) {
			assert.Contains(t, block, "(env "+env[name]+")", "--%s's usage names its variable", name)
		}
	}
	assert.Equal(t, len(flagEnv), n, "every variable's flag is listed")
}

// TestFlagsFromEnv: every kind of flag takes its variable's value where
// the command line does not set it; the command line wins; a value the
// flag refuses names the variable and what it takes.
func TestFlagsFromEnv(t *testing.T) {
	for k, v := range map[string]string{
		"NODE_NAME": "n1", "NUMA_LIST": "true", "PROC_ROOT": "/host/proc", "RESCAN_INTERVAL": "30s",
		"UEVENTS": "false", "KUBELET_PLUGINS_DIRECTORY_PATH": "/p", "KUBELET_REGISTRAR_DIRECTORY_PATH": "/r",
		"HEALTH_INTERVAL": "5s", "ALLOW_EFA_DEVICE_PLUGIN": "true", "KUBE_API_BURST": "7",
		"HEALTH_WINDOW": "2m", "HEALTH_LIMITS": "retransmit-timeouts=6", "UNHEALTHY_TAINT_EFFECT": "NoExecute",
	} {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	o, code, ok := parseArgs([]string{"--health-interval", "2s"}, &out, &out)
	require.True(t, ok, "%d %s", code, out.String())
	s := o.serve
	assert.Equal(t, "n1", s.Config.NodeName)
	assert.True(t, s.Config.NUMAList)
	assert.Equal(t, "/host/proc", s.ProcRoot)
	assert.Equal(t, 30*time.Second, s.RescanInterval)
	assert.Nil(t, s.Uevents, "UEVENTS=false")
	assert.Equal(t, "/p", s.PluginsDir)
	assert.Equal(t, "/r", s.RegistrarDir)
	assert.Equal(t, 2*time.Second, s.HealthInterval, "the flag wins")
	assert.True(t, s.AllowDevicePlugin)
	assert.Equal(t, 7, o.kubeAPIBurst)
	assert.Equal(t, 2*time.Minute, s.HealthPolicy.Window)
	assert.Contains(t, s.HealthPolicy.Limits(), "retransmit-timeouts=6,")
	assert.Contains(t, s.HealthPolicy.Limits(), "unresponsive-remotes=10", "the rules not named keep their defaults")
	assert.Equal(t, resourceapi.DeviceTaintEffectNoExecute, s.Config.UnhealthyEffect)

	for v, msg := range map[string]string{
		"RESCAN_INTERVAL=soon":        `RESCAN_INTERVAL="soon": not a duration such as 30s (--rescan-interval)`,
		"NUMA_LIST=yes":               `NUMA_LIST="yes": not true or false (--numa-list)`,
		"HEALTH_LIMITS=retransmits=1": `--health-limits: no health rule "retransmits"`,
		"UNHEALTHY_TAINT_EFFECT=None": `--unhealthy-taint-effect "None": NoSchedule or NoExecute`,
		"HEALTH_WINDOW=-1s":           `--health-window: health window -1s: must be positive`,
	} {
		k, val, _ := strings.Cut(v, "=")
		t.Setenv(k, val)
		out.Reset()
		_, code, ok := parseArgs(nil, &out, &out)
		assert.False(t, ok, v)
		assert.Equal(t, 2, code, v)
		assert.Contains(t, out.String(), msg, v)
		os.Unsetenv(k)
	}
}

// TestFlagsTableDocumented: docs/plugin.md's flags table has a row for
// every flag that has a variable, with that variable and the flag's
// default, and no row for a flag the plugin lacks.
func TestFlagsTableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/plugin.md")
	require.NoError(t, err)
	type row struct{ env, def string }
	rows := map[string]row{}
	cell := regexp.MustCompile("^`([^`]*)`")
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(l, "| `--") {
			continue
		}
		c := strings.Split(l, "|")
		require.Len(t, c, 5, l)
		name := strings.Trim(strings.TrimSpace(c[1]), "`-")
		env := strings.Trim(strings.TrimSpace(c[2]), "`")
		def := strings.TrimSpace(c[3])
		if m := cell.FindStringSubmatch(def); m != nil {
			def = m[1]
		}
		rows[name] = row{env, def}
	}
	var out bytes.Buffer
	_, _, ok := parseArgs([]string{"--help"}, &out, &out)
	require.False(t, ok)
	defaults := map[string]string{}
	defRe := regexp.MustCompile(`\(default (.*)\)\s*$`)
	for _, block := range strings.Split(out.String(), "\n  -")[1:] {
		name := strings.Fields(block)[0]
		if m := defRe.FindStringSubmatch(strings.TrimRight(block, "\n")); m != nil {
			defaults[name] = strings.Trim(m[1], `"`)
		}
	}
	for _, fe := range flagEnv {
		r, ok := rows[fe.flag]
		if !assert.True(t, ok, "--%s has no row in docs/plugin.md's flags table", fe.flag) {
			continue
		}
		assert.Equal(t, fe.env, r.env, "--%s's variable", fe.flag)
		if d, ok := defaults[fe.flag]; ok {
			a, errA := time.ParseDuration(d)
			b, errB := time.ParseDuration(r.def)
			if errA == nil && errB == nil {
				assert.Equal(t, a, b, "--%s's default", fe.flag) // 1m and 1m0s
			} else {
				assert.Equal(t, d, r.def, "--%s's default", fe.flag)
			}
		} else {
			assert.Contains(t, []string{"false", `""`, "required", "none (the chart passes its class's: `vpc.amazonaws.com/efa`)", "in-cluster configuration"}, r.def, "--%s has no default: the row says what then", fe.flag)
		}
		delete(rows, fe.flag)
	}
	assert.Empty(t, rows, "rows for flags the plugin lacks")
}
