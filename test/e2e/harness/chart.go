package harness

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Render runs `helm template` (the helm tool of this module's go.mod) on
// the chart with extra arguments.
func Render(t *testing.T, args ...string) []runtime.Object {
	t.Helper()
	return RenderRelease(t, "efakit", "efakit", args...)
}

// RenderRelease renders the chart as release name in namespace ns.
func RenderRelease(t *testing.T, name, ns string, args ...string) []runtime.Object {
	t.Helper()
	// The Kubernetes version of the e2e's own control plane; a caller's
	// --kube-version comes later and wins.
	version, err := ModuleKubeVersion("k8s")
	require.NoError(t, err)
	// The image a user pushed: the chart has no default (TestChartNeedsImage).
	// A values file, not --set, so that a caller's -f overrides it.
	image := filepath.Join(t.TempDir(), "image.yaml")
	require.NoError(t, os.WriteFile(image, []byte("image: {repository: registry.example/efakit-plugin}\n"), 0o644))
	cmd := exec.Command("go", append([]string{"tool", "helm", "template", name, filepath.Join(Root, "deployments", "helm", "efakit"), "--namespace", ns, "--kube-version", version,
		"-f", image}, args...)...)
	// In test/e2e, whose go.mod has the helm tool, wherever the test runs.
	cmd.Dir = e2eDir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())
	// Strict decoding into the API's own types: an unknown or misspelled
	// field fails here, not on a cluster.
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out.Bytes())))
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 || strings.TrimSpace(string(doc)) == "---" {
			continue
		}
		obj, _, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
		require.NoError(t, err, string(doc))
		objs = append(objs, obj)
	}
	return objs
}
