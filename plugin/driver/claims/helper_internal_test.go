package claims

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/cdi"
)

// TestHelperInternals: the helper's unexported names that efakit relies on
// (helper.go) are still what the pinned helper's source says. A helper
// upgrade that renames one fails here, not at a node's restart.
func TestHelperInternals(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "k8s.io/dynamic-resource-allocation").Output()
	require.NoError(t, err, "go list -m k8s.io/dynamic-resource-allocation")
	version, dir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	require.True(t, ok && dir != "", "the helper's module is not in the module cache: %q", out)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, "kubeletplugin", name))
		require.NoError(t, err)
		return string(b)
	}
	plugin, metadata := read("draplugin.go"), read("metadata.go")

	for _, c := range []struct{ src, want, what string }{
		{plugin, `path.Join(dir, "` + lockFileName + `")`, "the lock file"},
		{metadata, `metadataSubDir = "` + metadataDirName + `"`, "the device-metadata directory"},
		{metadata, `claimNs+"_"+claimName`, "a claim's metadata directory"},
		{metadata, `requestName, "metadata.json")`, "a request's metadata file"},
		{metadata, `"%s_` + cdi.MetadataClass + `_%s_%s.json", w.driverName, string(claimUID), requestName`, "the metadata CDI spec's name"},
		{plugin, `o.driverName + "-reg.sock"`, "the registration socket"},
		{plugin, `driverName + "-" + uid + "-reg.sock"`, "the rolling update's registration socket"},
		{plugin, `"dra-" + base64.RawURLEncoding`, "the registration socket that names no driver"},
		{plugin, `o.pluginSocket = "dra" + uidPart + ".sock"`, "the DRA socket"},
	} {
		assert.True(t, strings.Contains(c.src, c.want), "%s: the helper %s no longer holds %s (driver/helper.go)", c.what, version, c.want)
	}

	// The names built here are the ones checked above.
	assert.Equal(t, "/d/dra-device-metadata/ns_c/r/metadata.json", metadataFile("/d", "ns", "c", "r"))
	w, err := cdi.NewWriter(t.TempDir(), "dra.net")
	require.NoError(t, err)
	p, err := w.MetadataSpecPath("0123abcd-0000-4000-8000-000000000000", "efa")
	require.NoError(t, err)
	assert.Equal(t, "dra.net_metadata_0123abcd-0000-4000-8000-000000000000_efa.json", filepath.Base(p))
	assert.Equal(t, []string{"/r/dra.net-reg.sock", "/r/dra.net-*-reg.sock", "/d/dra.sock", "/d/dra-*.sock"},
		SocketPatterns("/r", "/d", "dra.net"))
}
