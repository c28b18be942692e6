package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ControlPlane is etcd and a kube-apiserver on loopback, started for the
// test binary and stopped with it.
type ControlPlane struct {
	Dir    string
	URL    string
	Etcd   string   // etcd's client URL
	apiCmd []string // kube-apiserver and its arguments, for a restart
	Config *rest.Config
	Client kubernetes.Interface
	Procs  []*exec.Cmd
	// scheduler is kube-scheduler's secure address once it runs.
	Scheduler string
}

// AdminToken is the control plane's admin bearer token (system:masters).
const AdminToken = "efakit-e2e-admin-token"

var (
	cpOnce sync.Once
	cp     *ControlPlane
	cpErr  error
)

// binDir holds the Kubernetes binaries built from test/e2e/k8s/go.mod,
// kept between runs (the Go build cache makes a rebuild quick).
func binDir() (string, error) {
	if d := os.Getenv("EFAKIT_E2E_BIN"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "efakit-e2e", "bin"), nil
}

// buildKube builds Kubernetes commands of test/e2e/k8s/go.mod, stamped
// with the module's version (else they report v0.0.0-master).
func buildKube(dir string, cmds ...string) error {
	return buildKubeOf("k8s", dir, cmds...)
}

// kubeCommands are the commands of test/e2e/k8s the tests run: built
// together at the first need of any, so that one go build compiles what
// they share once and links them side by side.
var kubeCommands = []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet"}

// builds are the go builds made by this test process, each once, by its
// directory and arguments.
var builds sync.Map

// string -> *buildOnce

type buildOnce struct {
	once sync.Once
	err  error
}

// buildKubeOf builds Kubernetes commands of the module in directory module
// (k8s, or k8s134 for the version matrix) into dir: for k8s every one of
// kubeCommands, for another module those asked for.
func buildKubeOf(module, dir string, cmds ...string) error {
	version, err := ModuleKubeVersion(module)
	if err != nil {
		return fmt.Errorf("version of k8s.io/kubernetes in test/e2e/%s: %w", module, err)
	}
	if module == "k8s" {
		cmds = kubeCommands
	}
	var pkgs []string
	for _, c := range cmds {
		pkgs = append(pkgs, "k8s.io/kubernetes/cmd/"+c)
	}
	// Without DWARF and symbols (-s -w): a third less link time, and
	// nothing here reads them.
	return goBuild(module, dir, cmds, nil, append([]string{"-ldflags", "-s -w -X k8s.io/component-base/version.gitVersion=" + version}, pkgs...)...)
}

// goBuild runs go build args in module's directory with env, into dir,
// once per test process, and not at all when dir holds every one of
// outputs built by the same go build: the same arguments, environment, Go
// and module requirements (go.mod and go.sum), as a stamp file beside
// them says. Linking these binaries takes most of a warm build.
func goBuild(module, dir string, outputs, env []string, args ...string) error {
	key := module + "\x00" + dir + "\x00" + strings.Join(args, "\x00")
	b, _ := builds.LoadOrStore(key, &buildOnce{})
	bo := b.(*buildOnce)
	bo.once.Do(func() {
		mod, err := os.ReadFile(filepath.Join(e2eDir, module, "go.mod"))
		if err != nil {
			bo.err = err
			return
		}
		sum, _ := os.ReadFile(filepath.Join(e2eDir, module, "go.sum"))
		h := sha256.New()
		for _, p := range [][]byte{[]byte(runtime.Version()), []byte(key), []byte(strings.Join(env, "\x00")), mod, sum} {
			h.Write(p)
			h.Write([]byte{0})
		}
		want := hex.EncodeToString(h.Sum(nil))
		stamp := filepath.Join(dir, "."+strings.Join(outputs, ",")+".built")
		if have, err := os.ReadFile(stamp); err == nil && string(have) == want && allExist(dir, outputs) {
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			bo.err = err
			return
		}
		cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, args...)...)
		cmd.Dir = filepath.Join(e2eDir, module)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			bo.err = fmt.Errorf("go build %v (test/e2e/%s): %v\n%s", outputs, module, err, out)
			return
		}
		bo.err = os.WriteFile(stamp, []byte(want), 0o644)
	})
	return bo.err
}

// allExist tells whether dir holds every one of names.
func allExist(dir string, names []string) bool {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return false
		}
	}
	return true
}

// ModuleKubeVersion is the version of k8s.io/kubernetes the module in
// directory module pins.
func ModuleKubeVersion(module string) (string, error) {
	out, err := exec.Command("go", "-C", filepath.Join(e2eDir, module), "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
	return strings.TrimSpace(string(out)), err
}

// kubeBinDir is where a module's Kubernetes binaries are kept: binDir for
// k8s, which every other test uses, and a directory named by the version
// beside them for another module (bin/v1.34.4).
func kubeBinDir(module string) (string, error) {
	bins, err := binDir()
	if err != nil || module == "k8s" {
		return bins, err
	}
	version, err := ModuleKubeVersion(module)
	if err != nil {
		return "", fmt.Errorf("version of k8s.io/kubernetes in test/e2e/%s: %w", module, err)
	}
	return filepath.Join(bins, version), nil
}

// FreePort is a TCP port free on loopback now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartControlPlane starts etcd (from the machine: Debian's etcd-server)
// and a kube-apiserver of test/e2e/k8s on loopback, with a static admin
// token and RBAC, the server with extra arguments (feature gates) where
// given.
func StartControlPlane(apiArgs ...string) (*ControlPlane, error) {
	return StartControlPlaneOf("k8s", apiArgs...)
}

// StartControlPlaneOf is StartControlPlane with the kube-apiserver of the
// module in directory module (k8s134: Kubernetes 1.34).
func StartControlPlaneOf(module string, apiArgs ...string) (*ControlPlane, error) {
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("etcd is not installed (apt-get install etcd-server): %w", err)
	}
	bins, err := kubeBinDir(module)
	if err != nil {
		return nil, err
	}
	if err := buildKubeOf(module, bins, "kube-apiserver"); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "efakit-e2e-")
	if err != nil {
		return nil, err
	}
	c := &ControlPlane{Dir: dir}
	etcdPort, err1 := FreePort()
	peerPort, err2 := FreePort()
	apiPort, err3 := FreePort()
	if err := firstErr(err1, err2, err3); err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	c.Etcd = etcdURL
	if err := c.start(etcd, "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort)); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(AdminToken+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	c.apiCmd = []string{filepath.Join(bins, "kube-apiserver"),
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(apiPort),
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokens,
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile, "--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", "10.96.0.0/24", "--advertise-address", "127.0.0.1",
		// A loopback address cannot be a kubernetes service endpoint.
		"--endpoint-reconciler-type", "none",
		// The real node's kubelet is reached by its host name, which
		// resolves to a loopback address (a node cannot have one).
		"--kubelet-preferred-address-types", "Hostname,InternalIP"}
	c.apiCmd = append(c.apiCmd, apiArgs...)
	if err := c.start(c.apiCmd[0], c.apiCmd[1:]...); err != nil {
		return nil, err
	}
	// The tests' own client is not rate-limited (QPS -1): client-go's
	// default of 5 requests a second, burst 10, paced every test's polls
	// and the version matrix's creates, which are the tests' own doing,
	// not the components' under test.
	c.Config = &rest.Config{Host: c.URL, BearerToken: AdminToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	if err := writeKubeconfig(filepath.Join(dir, "admin.kubeconfig"), c.URL, AdminToken); err != nil {
		return nil, err
	}
	if err := c.waitReady(90 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	c.Client, err = kubernetes.NewForConfig(c.Config)
	return c, err
}

// writeKubeconfig writes a kubeconfig that reaches server (its
// certificate not checked) with a bearer token.
func writeKubeconfig(path, server, token string) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: e2e, user: {token: %q}}]
contexts: [{name: e2e, context: {cluster: e2e, user: e2e}}]
current-context: e2e
`, server, token)
	return os.WriteFile(path, []byte(kc), 0o600)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (c *ControlPlane) start(bin string, args ...string) error {
	cmd := exec.Command(bin, args...)
	log, err := os.OpenFile(filepath.Join(c.Dir, filepath.Base(bin)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	c.Procs = append(c.Procs, cmd)
	return nil
}

func (c *ControlPlane) waitReady(timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", c.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(c.Dir, "kube-apiserver.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Errorf("kube-apiserver not ready after %s:\n%s", timeout, b)
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// port and etcd.
func (c *ControlPlane) RestartAPIServer() error {
	c.StopAPIServer()
	return c.StartAPIServer()
}

// StopAPIServer kills kube-apiserver (etcd, the scheduler and the
// controller manager go on).
func (c *ControlPlane) StopAPIServer() {
	for i, p := range c.Procs {
		if p.Path == c.apiCmd[0] {
			_ = p.Process.Kill()
			_, _ = p.Process.Wait()
			c.Procs = append(c.Procs[:i], c.Procs[i+1:]...)
			break
		}
	}
}

// StartAPIServer starts kube-apiserver again on its port and etcd, and
// waits until it is ready.
func (c *ControlPlane) StartAPIServer() error {
	if err := c.start(c.apiCmd[0], c.apiCmd[1:]...); err != nil {
		return err
	}
	return c.waitReady(90 * time.Second)
}

// CompactEtcd moves etcd's revision on (a key of its own, efakit-e2e/
// revision) and compacts its history up to there (its v3 JSON gateway), as
// the API server compacts every five minutes: a watch that resumes from
// any revision a client saw before is answered 410 Gone.
func (c *ControlPlane) CompactEtcd() error {
	post := func(path, body string) (map[string]any, error) {
		resp, err := http.Post(c.Etcd+path, "application/json", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("etcd %s: %s: %v", path, resp.Status, out)
		}
		return out, nil
	}
	// A write outside the API server's keys moves the revision past
	// everything any client has seen; the answer tells the revision.
	r, err := post("/v3/kv/put", `{"key": "ZWZha2l0LWUyZS9yZXZpc2lvbg==", "value": "MQ=="}`)
	if err != nil {
		return err
	}
	h, _ := r["header"].(map[string]any)
	rev, _ := h["revision"].(string)
	if rev == "" {
		return fmt.Errorf("etcd: no revision in %v", r)
	}
	_, err = post("/v3/kv/compaction", fmt.Sprintf(`{"revision": %q, "physical": true}`, rev))
	return err
}

// LogTail is the end of a process's log.
func (c *ControlPlane) LogTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Stop kills the control plane's processes, last started first, and
// removes its directory.
func (c *ControlPlane) Stop() {
	for i := len(c.Procs) - 1; i >= 0; i-- {
		_ = c.Procs[i].Process.Kill()
		_, _ = c.Procs[i].Process.Wait()
	}
	_ = os.RemoveAll(c.Dir)
}

// APIServer returns the shared control plane, started on first use.
func APIServer(t *testing.T) *ControlPlane {
	t.Helper()
	cpOnce.Do(func() { cp, cpErr = StartControlPlane() })
	require.NoError(t, cpErr)
	return cp
}

// BuildBinaries builds the Kubernetes commands, the node's runtime and
// the plugin that the tests run, or finds them built.
func BuildBinaries() error {
	bins, err := binDir()
	if err != nil {
		return err
	}
	if err := buildKube(bins); err != nil {
		return err
	}
	if _, err := realNodeBinaries(); err != nil {
		return err
	}
	_, err = PluginBinary()
	return err
}

// StopShared stops what the test binary shared among its tests: the
// control plane APIServer started, and the commands PluginCommand built.
func StopShared() {
	if cp != nil {
		cp.Stop()
	}
	commands.Range(func(_, v any) bool {
		if c := v.(*command); c.path != "" {
			_ = os.RemoveAll(filepath.Dir(c.path))
		}
		return true
	})
}
