package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// TestNodeGroupMode: the label's value where the node has it, the default
// where it has not (or no label is named), an error naming the label for
// a value that is no mode.
func TestNodeGroupMode(t *testing.T) {
	t.Parallel()
	const key = "efakit.io/groups"
	for _, tc := range []struct {
		labels map[string]string
		key    string
		want   resources.GroupMode
		err    string
	}{
		{map[string]string{key: "exclusive"}, key, resources.GroupsExclusive, ""},
		{map[string]string{key: "mixed"}, key, resources.GroupsMixed, ""},
		{map[string]string{key: "none"}, key, resources.GroupsNone, ""},
		{map[string]string{key: ""}, key, resources.GroupsNone, ""},
		{map[string]string{}, key, resources.GroupsMixed, ""},
		{map[string]string{key: "exclusive"}, "", resources.GroupsMixed, ""},
		{map[string]string{key: "all"}, key, "", `node label efakit.io/groups: unknown group mode "all" (none, exclusive, mixed)`},
	} {
		got, err := resources.NodeGroupMode(tc.labels, tc.key, resources.GroupsMixed)
		if tc.err != "" {
			assert.EqualError(t, err, tc.err, "%v", tc.labels)
			continue
		}
		assert.NoError(t, err)
		assert.Equal(t, tc.want, got, "%v %q", tc.labels, tc.key)
	}
}
