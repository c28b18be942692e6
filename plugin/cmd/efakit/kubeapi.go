package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/yaml"
)

// The doctor reads one Node and one node's ResourceSlices. For those two
// GETs client-go would cost every run of efakit memory: a program holding
// the API types started at 9 MiB of RSS here, at 18 MiB with client-go's
// clientset and kubeconfig loader (which register every API group). So
// efakit asks the API server over net/http, with the credentials of a
// kubeconfig or of the pod's service account.

// serviceAccountDir holds a pod's API token and the cluster's CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxAPIResponse bounds what one API answer may hold: a Node, or the
// slices of one driver on one node, are far smaller.
const maxAPIResponse = 32 << 20

// kubeAPI is doctor.API over the Kubernetes REST API.
type kubeAPI struct {
	server string // scheme://host[:port][/path], no trailing slash
	client *http.Client
	header http.Header // Authorization, when the credentials are a token or a password
}

// kubeconfig is the part of a kubeconfig file (clientcmd's v1 Config)
// efakit reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string    `json:"name"`
		Cluster kcCluster `json:"cluster"`
	} `json:"clusters"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Users []struct {
		Name string `json:"name"`
		User kcUser `json:"user"`
	} `json:"users"`
}

// kcCluster is where the API server is and how to trust it.
type kcCluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	TLSServerName            string `json:"tls-server-name"`
	ProxyURL                 string `json:"proxy-url"`
}

// kcUser is who efakit is to the API server.
type kcUser struct {
	ClientCertificate     string              `json:"client-certificate"`
	ClientCertificateData []byte              `json:"client-certificate-data"`
	ClientKey             string              `json:"client-key"`
	ClientKeyData         []byte              `json:"client-key-data"`
	Token                 string              `json:"token"`
	TokenFile             string              `json:"tokenFile"`
	Username              string              `json:"username"`
	Password              string              `json:"password"`
	Exec                  *execConfig         `json:"exec"`
	AuthProvider          *struct{}           `json:"auth-provider"`
	Impersonate           string              `json:"as"`
	ImpersonateGroups     []string            `json:"as-groups"`
	ImpersonateUID        string              `json:"as-uid"`
	ImpersonateExtra      map[string][]string `json:"as-user-extra"`
}

// execConfig is a credential plugin (aws eks get-token, say).
type execConfig struct {
	Command            string                         `json:"command"`
	Args               []string                       `json:"args"`
	Env                []struct{ Name, Value string } `json:"env"`
	APIVersion         string                         `json:"apiVersion"`
	ProvideClusterInfo bool                           `json:"provideClusterInfo"`
}

// clusterInfo is where the API server is and how to trust it, with the
// files read.
type clusterInfo struct {
	server     string
	caData     []byte // PEM; system roots when empty
	insecure   bool
	serverName string
	proxy      string
}

// currentContext is what a kubeconfig's current context names.
type currentContext struct {
	name     string
	cluster  kcCluster
	userName string
	user     *kcUser // nil when the context names no user
}

// parseKubeconfig finds the current context's cluster and user. What
// efakit cannot do with them (an auth-provider, impersonation) is an
// error, not a request made without it.
func parseKubeconfig(b []byte) (currentContext, error) {
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return currentContext{}, err
	}
	cur := currentContext{name: kc.CurrentContext}
	if cur.name == "" {
		return cur, errors.New("no current-context")
	}
	var clusterName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == cur.name {
			clusterName, cur.userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return cur, fmt.Errorf("context %q not found", cur.name)
	}
	found = false
	for _, c := range kc.Clusters {
		if c.Name == clusterName {
			cur.cluster, found = c.Cluster, true
		}
	}
	if !found || cur.cluster.Server == "" {
		return cur, fmt.Errorf("cluster %q of context %q not found or without a server", clusterName, cur.name)
	}
	for i, u := range kc.Users {
		if u.Name == cur.userName {
			cur.user = &kc.Users[i].User
		}
	}
	if cur.userName == "" {
		return cur, nil
	}
	fail := func(msg string) error { return fmt.Errorf("user %s: %s", cur.userName, msg) }
	switch u := cur.user; {
	case u == nil:
		return cur, fmt.Errorf("user %q of context %q not found", cur.userName, cur.name)
	case u.AuthProvider != nil:
		return cur, fail("auth-provider credentials are not supported by efakit (use a token or an exec plugin)")
	case u.Impersonate != "" || len(u.ImpersonateGroups) > 0 || u.ImpersonateUID != "" || len(u.ImpersonateExtra) > 0:
		return cur, fail("impersonation (as, as-groups, as-uid, as-user-extra) is not supported by efakit")
	case u.Exec != nil && (u.Exec.Command == "" || u.Exec.APIVersion == ""):
		return cur, fail("exec needs a command and an apiVersion")
	}
	return cur, nil
}

// apiFromKubeconfig reads a kubeconfig file (parseKubeconfig), the files
// it names, relative to its directory as kubectl takes them, and runs its
// credential plugin.
func apiFromKubeconfig(ctx context.Context, path, userAgent string) (*kubeAPI, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cur, err := parseKubeconfig(b)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	fail := func(err error) (*kubeAPI, error) {
		return nil, fmt.Errorf("kubeconfig %s: context %s: %w", path, cur.name, err)
	}
	read := func(p string) ([]byte, error) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(path), p)
		}
		return os.ReadFile(p)
	}
	cl := cur.cluster
	ci := &clusterInfo{server: cl.Server, caData: cl.CertificateAuthorityData, insecure: cl.InsecureSkipTLSVerify,
		serverName: cl.TLSServerName, proxy: cl.ProxyURL}
	if len(ci.caData) == 0 && cl.CertificateAuthority != "" {
		if ci.caData, err = read(cl.CertificateAuthority); err != nil {
			return fail(err)
		}
	}
	header := http.Header{}
	var certPEM, keyPEM []byte
	if u := cur.user; u != nil {
		certPEM, keyPEM = u.ClientCertificateData, u.ClientKeyData
		if len(certPEM) == 0 && u.ClientCertificate != "" {
			if certPEM, err = read(u.ClientCertificate); err != nil {
				return fail(err)
			}
		}
		if len(keyPEM) == 0 && u.ClientKey != "" {
			if keyPEM, err = read(u.ClientKey); err != nil {
				return fail(err)
			}
		}
		token := u.Token
		if token == "" && u.TokenFile != "" {
			t, err := read(u.TokenFile)
			if err != nil {
				return fail(err)
			}
			token = strings.TrimSpace(string(t))
		}
		if u.Exec != nil {
			cred, err := runExec(ctx, u.Exec, ci)
			if err != nil {
				return fail(fmt.Errorf("user %s: exec %s: %w", cur.userName, u.Exec.Command, err))
			}
			if cred.Status.Token != "" {
				token = cred.Status.Token
			}
			if cred.Status.ClientCertificateData != "" {
				certPEM, keyPEM = []byte(cred.Status.ClientCertificateData), []byte(cred.Status.ClientKeyData)
			}
		}
		switch {
		case token != "":
			header.Set("Authorization", "Bearer "+token)
		case u.Username != "":
			header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username+":"+u.Password)))
		}
	}
	api, err := newKubeAPI(ci, certPEM, keyPEM, header, userAgent)
	if err != nil {
		return fail(err)
	}
	return api, nil
}

// execCredential is what a credential plugin prints.
type execCredential struct {
	Status struct {
		Token                 string `json:"token"`
		ClientCertificateData string `json:"clientCertificateData"`
		ClientKeyData         string `json:"clientKeyData"`
	} `json:"status"`
}

// runExec runs a credential plugin as kubectl does: its env added to ours,
// KUBERNETES_EXEC_INFO saying it cannot ask the user anything.
func runExec(ctx context.Context, e *execConfig, ci *clusterInfo) (execCredential, error) {
	var cred execCredential
	spec := map[string]any{"interactive": false}
	if e.ProvideClusterInfo {
		spec["cluster"] = map[string]any{"server": ci.server, "certificate-authority-data": ci.caData,
			"insecure-skip-tls-verify": ci.insecure, "tls-server-name": ci.serverName, "proxy-url": ci.proxy}
	}
	info, err := json.Marshal(map[string]any{"apiVersion": e.APIVersion, "kind": "ExecCredential", "spec": spec})
	if err != nil {
		return cred, err
	}
	cmd := exec.CommandContext(ctx, e.Command, e.Args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_EXEC_INFO="+string(info))
	for _, kv := range e.Env {
		cmd.Env = append(cmd.Env, kv.Name+"="+kv.Value)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return cred, fmt.Errorf("%w: %s", err, strings.ReplaceAll(msg, "\n", " "))
		}
		return cred, err
	}
	if err := json.Unmarshal(out, &cred); err != nil {
		return cred, fmt.Errorf("output: %w", err)
	}
	if cred.Status.Token == "" && cred.Status.ClientCertificateData == "" {
		return cred, errors.New("output holds neither a token nor a client certificate")
	}
	return cred, nil
}

// apiInCluster uses the pod's service account: the API server's address
// from KUBERNETES_SERVICE_HOST and _PORT, the token and CA from saDir.
func apiInCluster(getenv func(string) string, saDir, userAgent string) (*kubeAPI, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod")
	}
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	header := http.Header{}
	header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	return newKubeAPI(&clusterInfo{server: "https://" + net.JoinHostPort(host, port), caData: ca}, nil, nil, header, userAgent)
}

func newKubeAPI(ci *clusterInfo, certPEM, keyPEM []byte, header http.Header, userAgent string) (*kubeAPI, error) {
	u, err := url.Parse(ci.server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("server %q is not an http or https URL", ci.server)
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: ci.insecure, ServerName: ci.serverName}
	if len(ci.caData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ci.caData) {
			return nil, errors.New("the certificate authority holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	if len(certPEM) > 0 {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	proxy := http.ProxyFromEnvironment
	if ci.proxy != "" {
		p, err := url.Parse(ci.proxy)
		if err != nil {
			return nil, fmt.Errorf("proxy-url: %w", err)
		}
		proxy = http.ProxyURL(p)
	}
	header.Set("Accept", "application/json")
	header.Set("User-Agent", userAgent)
	return &kubeAPI{
		server: strings.TrimSuffix(ci.server, "/"),
		// Each call is bounded, so that one slow call leaves time for
		// the others.
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: proxy, TLSClientConfig: tlsConfig}},
		header: header,
	}, nil
}

// get reads one object from the API into out. An answer other than 200 is
// an error with the API's own message (`nodes "x" not found`).
func (a *kubeAPI) get(ctx context.Context, path string, query url.Values, out any) error {
	u := a.server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header = a.header.Clone()
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIResponse+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if len(body) > maxAPIResponse {
		return fmt.Errorf("GET %s: more than %d bytes", path, maxAPIResponse)
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
			return fmt.Errorf("%s (%s)", st.Message, resp.Status)
		}
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// Node reads a Node.
func (a *kubeAPI) Node(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	if err := a.get(ctx, "/api/v1/nodes/"+url.PathEscape(name), nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// ResourceSlices lists the ResourceSlices of a driver on a node.
func (a *kubeAPI) ResourceSlices(ctx context.Context, driverName, node string) ([]resourceapi.ResourceSlice, error) {
	var l resourceapi.ResourceSliceList
	q := url.Values{"fieldSelector": {fields.Set{"spec.driver": driverName, "spec.nodeName": node}.String()}}
	if err := a.get(ctx, "/apis/resource.k8s.io/v1/resourceslices", q, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}
