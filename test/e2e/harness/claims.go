package harness

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// SplitDocs splits a YAML stream into its documents.
func SplitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split(s, "\n---") {
		if strings.TrimSpace(d) != "" {
			out = append(out, d)
		}
	}
	return out
}

// CreateSeed creates the users' claim templates and claims of a file in
// testdata/claims in the node's namespace, unchanged but for it.
func CreateSeed(t *testing.T, c *ControlPlane, file string) {
	ctx := context.Background()
	for _, doc := range SplitDocs(ReadClaimsFile(t, file)) {
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		switch meta.Kind {
		case "ResourceClaimTemplate":
			var tm resourceapi.ResourceClaimTemplate
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &tm))
			tm.Namespace = NodeNS
			_, err := c.Client.ResourceV1().ResourceClaimTemplates(NodeNS).Create(ctx, &tm, metav1.CreateOptions{})
			require.NoError(t, CreateIgnoreExists(err))
		case "ResourceClaim":
			var cl resourceapi.ResourceClaim
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &cl))
			cl.Namespace = NodeNS
			_, err := c.Client.ResourceV1().ResourceClaims(NodeNS).Create(ctx, &cl, metav1.CreateOptions{})
			require.NoError(t, CreateIgnoreExists(err))
		}
	}
}

// CreateTemplates creates `efakit claims`' templates for a fixture and
// group mode under a name prefix, and returns them by their own name.
func CreateTemplates(t *testing.T, c *ControlPlane, fixture string, mode resources.GroupMode, prefix string) (map[string]*resourceapi.ResourceClaimTemplate, *resources.AllPod) {
	topo := ScanFixture(t, fixture)
	tms, all := resources.ClaimTemplates(topo, mode, "")
	out := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, tm := range tms {
		tmpl := tm.Template.DeepCopy()
		out[tmpl.Name] = tmpl
		tmpl.Name, tmpl.Namespace = prefix+tmpl.Name, NodeNS
		_, err := c.Client.ResourceV1().ResourceClaimTemplates(NodeNS).Create(context.Background(), tmpl, metav1.CreateOptions{})
		require.NoError(t, CreateIgnoreExists(err))
	}
	if all != nil {
		for i := range all.Pod.Spec.ResourceClaims {
			p := prefix + *all.Pod.Spec.ResourceClaims[i].ResourceClaimTemplateName
			all.Pod.Spec.ResourceClaims[i].ResourceClaimTemplateName = &p
		}
	}
	return out, all
}
