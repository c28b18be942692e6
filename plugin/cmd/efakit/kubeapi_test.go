package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efakit/efakit/plugin/doctor"
)

// fakeAPIServer serves a Node and the ResourceSlices of a driver on it
// over TLS, as the API server does, to a client holding token; it records
// each request's path, query and user agent.
type fakeAPIServer struct {
	*httptest.Server
	token string
	mu    sync.Mutex
	seen  []string
}

func newFakeAPIServer(t *testing.T, token string, node *corev1.Node, slices []resourceapi.ResourceSlice) *fakeAPIServer {
	s := &fakeAPIServer{token: token}
	mux := http.NewServeMux()
	status := func(w http.ResponseWriter, code int, msg string) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Message: msg, Code: int32(code)})
	}
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != node.Name {
			status(w, http.StatusNotFound, fmt.Sprintf("nodes %q not found", r.PathValue("name")))
			return
		}
		_ = json.NewEncoder(w).Encode(node)
	})
	mux.HandleFunc("GET /apis/resource.k8s.io/v1/resourceslices", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(resourceapi.ResourceSliceList{Items: slices})
	})
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.Path+"?"+r.URL.RawQuery+" "+r.UserAgent()+" "+r.Header.Get("Accept"))
		s.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+s.token {
			status(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// caPEM is the server's certificate, as a kubeconfig's CA.
func (s *fakeAPIServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

func (s *fakeAPIServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func writeFile(t *testing.T, path, data string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
	return path
}

func testNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"vpc.amazonaws.com/efa": apiresource.MustParse("32")}}}
}

// TestKubeAPIFromKubeconfig: the current context's cluster and user, a CA
// file relative to the kubeconfig, a bearer token; the Node and the node's
// slices of the driver decode, the field selector names both, and the
// API's own message comes back for a missing node.
func TestKubeAPIFromKubeconfig(t *testing.T) {
	t.Parallel()
	node := "node-1"
	srv := newFakeAPIServer(t, "s3cret", testNode(), []resourceapi.ResourceSlice{{ObjectMeta: metav1.ObjectMeta{Name: "s1"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "dra.net", NodeName: &node}}})
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ca.crt"), string(srv.caPEM()))
	kc := writeFile(t, filepath.Join(dir, "config"), fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: right
contexts:
- {name: wrong, context: {cluster: other, user: nobody}}
- {name: right, context: {cluster: c, user: u}}
clusters:
- {name: other, cluster: {server: "https://192.0.2.1:1"}}
- {name: c, cluster: {server: %q, certificate-authority: ca.crt}}
users:
- {name: nobody, user: {token: wrong}}
- {name: u, user: {token: s3cret}}
`, srv.URL))
	api, err := apiFromKubeconfig(context.Background(), kc, "efakit/test")
	require.NoError(t, err)
	n, err := api.Node(context.Background(), "node-1")
	require.NoError(t, err)
	q := n.Status.Capacity["vpc.amazonaws.com/efa"]
	assert.Equal(t, "32", q.String())
	l, err := api.ResourceSlices(context.Background(), "dra.net", "node-1")
	require.NoError(t, err)
	require.Len(t, l, 1)
	assert.Equal(t, "s1", l[0].Name)
	_, err = api.Node(context.Background(), "node-2")
	assert.EqualError(t, err, `nodes "node-2" not found (404 Not Found)`)
	assert.Equal(t, []string{
		"/api/v1/nodes/node-1? efakit/test application/json",
		"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Ddra.net%2Cspec.nodeName%3Dnode-1 efakit/test application/json",
		"/api/v1/nodes/node-2? efakit/test application/json",
	}, srv.requests())
}

// TestKubeAPIExecPlugin: a credential plugin's token is sent; the plugin
// learns it cannot ask the user (KUBERNETES_EXEC_INFO) and gets its env.
func TestKubeAPIExecPlugin(t *testing.T) {
	t.Parallel()
	srv := newFakeAPIServer(t, "from-exec", testNode(), nil)
	dir := t.TempDir()
	info := filepath.Join(dir, "exec-info")
	kc := writeFile(t, filepath.Join(dir, "config"), fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/sh
      args: ["-c", 'printf %%s "$KUBERNETES_EXEC_INFO" > %s; printf %%s "{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"$TOKEN\"}}"']
      env: [{name: TOKEN, value: from-exec}]
`, srv.URL, base64.StdEncoding.EncodeToString(srv.caPEM()), info))
	api, err := apiFromKubeconfig(context.Background(), kc, "efakit/test")
	require.NoError(t, err)
	_, err = api.Node(context.Background(), "node-1")
	require.NoError(t, err)
	b, err := os.ReadFile(info)
	require.NoError(t, err)
	assert.JSONEq(t, `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`, string(b))
}

// TestKubeAPIInCluster: the service account's token and CA, the server
// from the environment.
func TestKubeAPIInCluster(t *testing.T) {
	t.Parallel()
	srv := newFakeAPIServer(t, "sa-token", testNode(), nil)
	sa := t.TempDir()
	writeFile(t, filepath.Join(sa, "token"), "sa-token\n")
	writeFile(t, filepath.Join(sa, "ca.crt"), string(srv.caPEM()))
	host, port, ok := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	require.True(t, ok)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
	api, reason := apiClient(context.Background(), "", func(k string) string { return env[k] }, sa)
	require.Empty(t, reason)
	_, err := api.Node(context.Background(), "node-1")
	require.NoError(t, err)

	api, reason = apiClient(context.Background(), "", func(string) string { return "" }, sa)
	assert.Nil(t, api)
	assert.Equal(t, "no --kubeconfig and no in-cluster configuration (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod)", reason)
}

// TestKubeAPIRefuses what it cannot do faithfully, naming the kubeconfig
// and the user, rather than asking without the credentials.
func TestKubeAPIRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ config, want string }{
		"auth-provider": {`users: [{name: u, user: {auth-provider: {name: oidc}}}]`, "user u: auth-provider credentials are not supported"},
		"impersonation": {`users: [{name: u, user: {token: t, as: admin}}]`, "user u: impersonation"},
		"no user":       {`users: []`, `user "u" of context "x" not found`},
		"bad server":    {`users: [{name: u, user: {token: t}}]` + "\nclusters: [{name: c, cluster: {server: \"ftp://h\"}}]", `server "ftp://h" is not an http or https URL`},
	} {
		cfg := "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n" + tc.config + "\n"
		if !strings.Contains(tc.config, "clusters:") {
			cfg += "clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"
		}
		kc := writeFile(t, filepath.Join(dir, strings.ReplaceAll(name, " ", "-")), cfg)
		_, err := apiFromKubeconfig(context.Background(), kc, "efakit/test")
		assert.ErrorContains(t, err, tc.want, name)
		assert.ErrorContains(t, err, kc, name)
	}
}

// TestDoctorThroughAPI: efakit doctor with --kubeconfig reads the Node
// through the API: AWS's device plugin's capacity fails the check.
func TestDoctorThroughAPI(t *testing.T) {
	t.Parallel()
	srv := newFakeAPIServer(t, "s3cret", testNode(), nil)
	kc := writeFile(t, filepath.Join(t.TempDir(), "config"), fmt.Sprintf(`current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: s3cret}}]
`, srv.URL, base64.StdEncoding.EncodeToString(srv.caPEM())))
	args := doctorArgs(t, "--node", "node-1", "-o", "json")
	for i, a := range args {
		if a == "--kubeconfig" {
			args[i+1] = kc
		}
	}
	_, out, errOut := runCLI(args...)
	var rep doctor.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), errOut)
	c, ok := rep.Check(doctor.CheckDevicePlugin)
	require.True(t, ok)
	assert.Equal(t, doctor.Fail, c.Status)
	assert.Contains(t, c.Message, "node node-1 has capacity vpc.amazonaws.com/efa: 32")
}

// FuzzParseKubeconfig: a kubeconfig is outside input; parsing never
// panics, and what it accepts has a current context with a server, and a
// user where the context names one.
func FuzzParseKubeconfig(f *testing.F) {
	for _, s := range []string{
		"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: \"https://h:6443\", certificate-authority-data: Zm9v}}]\nusers: [{name: u, user: {token: t}}]\n",
		"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: \"http://h\"}}]\n",
		"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: s}}]\nusers: [{name: u, user: {exec: {command: aws, apiVersion: v, args: [eks, get-token], env: [{name: A, value: b}]}}}]\n",
		"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: s}}]\nusers: [{name: u, user: {auth-provider: {name: oidc}}}]\n",
		"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: s}}]\nusers: [{name: u, user: {as: admin, as-user-extra: {a: [b]}}}]\n",
		"{}", "current-context: [", "clusters: 1", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cur, err := parseKubeconfig(b)
		if err != nil {
			return
		}
		if cur.name == "" || cur.cluster.Server == "" || (cur.userName != "" && cur.user == nil) {
			t.Fatalf("accepted %q as %+v", b, cur)
		}
		if u := cur.user; u != nil && (u.AuthProvider != nil || u.Impersonate != "" || (u.Exec != nil && u.Exec.Command == "")) {
			t.Fatalf("accepted %q with what efakit cannot do: %+v", b, u)
		}
	})
}
