package checkpoint_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/efakit/efakit/plugin/driver/checkpoint"
)

// good is a valid checkpoint file's bytes.
func good(t *testing.T) []byte {
	t.Helper()
	s := checkpoint.NewStore(t.TempDir())
	require.NoError(t, s.Save(state(boot1, 2)))
	data, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	return data
}

// rewrite re-encodes a checkpoint file after edit changes it.
func rewrite(t *testing.T, data []byte, edit func(f map[string]any)) []byte {
	t.Helper()
	var f map[string]any
	require.NoError(t, json.Unmarshal(data, &f))
	edit(f)
	out, err := json.Marshal(f)
	require.NoError(t, err)
	return out
}

func TestCorrupt(t *testing.T) {
	t.Parallel()
	g := good(t)
	cases := map[string][]byte{
		"empty":             {},
		"not json":          []byte("not json"),
		"truncated":         g[:len(g)/2],
		"null":              []byte("null"),
		"array":             []byte("[]"),
		"trailing":          append(append([]byte{}, g...), []byte("{}")...),
		"checksum mismatch": bytes.Replace(g, []byte(`"namespace": "ml"`), []byte(`"namespace": "mm"`), 1),
		"version 0":         rewrite(t, g, func(f map[string]any) { f["version"] = 0 }),
		"file version 1":    rewrite(t, g, func(f map[string]any) { f["version"] = 1 }),
		"no version":        rewrite(t, g, func(f map[string]any) { delete(f, "version") }),
		"no data":           rewrite(t, g, func(f map[string]any) { delete(f, "data") }),
		"unknown field":     rewrite(t, g, func(f map[string]any) { f["extra"] = true }),
		"bad checksum":      rewrite(t, g, func(f map[string]any) { f["checksum"] = strings.Repeat("0", 64) }),
	}
	// Consistent content under a matching checksum is still checked.
	for name, edit := range map[string]func(d map[string]any){
		"data version": func(d map[string]any) { d["version"] = 1 },
		"no boot ID":   func(d map[string]any) { d["bootID"] = "" },
		"wrong key": func(d map[string]any) {
			claims := d["claims"].(map[string]any)
			for k, v := range claims {
				delete(claims, k)
				claims["x"+k] = v
				break
			}
		},
	} {
		cases[name] = resum(t, g, edit)
	}
	require.NotEqual(t, g, cases["checksum mismatch"])

	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := checkpoint.NewStore(dir)
			require.NoError(t, os.WriteFile(s.Path(), content, 0o600))

			got, err := s.Load(boot1)
			require.Error(t, err)
			assert.ErrorIs(t, err, checkpoint.ErrCorrupt)
			aside := s.Path() + checkpoint.CorruptSuffix
			assert.Contains(t, err.Error(), aside)
			t.Log(err)
			assert.Equal(t, &checkpoint.State{Version: checkpoint.Version, BootID: boot1, Claims: map[string]checkpoint.Claim{}}, got)

			moved, rerr := os.ReadFile(aside)
			require.NoError(t, rerr)
			assert.Equal(t, content, moved, "the damaged file is kept as it was")
			_, serr := os.Stat(s.Path())
			assert.True(t, errors.Is(serr, os.ErrNotExist))

			// The plugin goes on: the next Save and Load work.
			got.Claims[claim(7, 4).UID] = claim(7, 4)
			require.NoError(t, s.Save(got))
			again, err := s.Load(boot1)
			require.NoError(t, err)
			assert.Equal(t, got, again)
			assert.ElementsMatch(t, []string{"checkpoint.json", "checkpoint.json.corrupt"}, listDir(t, dir))
		})
	}
}

// resum edits a checkpoint's data and gives it a matching checksum, the
// canonical JSON's SHA-256.
func resum(t *testing.T, data []byte, edit func(d map[string]any)) []byte {
	t.Helper()
	var f struct {
		Version  int             `json:"version"`
		Checksum string          `json:"checksum"`
		Data     json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	var d map[string]any
	require.NoError(t, json.Unmarshal(f.Data, &d))
	edit(d)
	canon, err := json.Marshal(d)
	require.NoError(t, err)
	// Through the Store's own writer, to get the checksum right: decode
	// the edited data as a State, unchecked, and marshal it back.
	var st checkpoint.State
	require.NoError(t, json.Unmarshal(canon, &st))
	canon, err = json.Marshal(&st)
	require.NoError(t, err)
	f.Data = canon
	f.Checksum = sha256Hex(canon)
	out, err := json.Marshal(f)
	require.NoError(t, err)
	return out
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TestReformattedIsValid: the checksum is over the canonical JSON of the
// data, so re-indenting the file (jq) keeps it valid.
func TestReformattedIsValid(t *testing.T) {
	t.Parallel()
	g := good(t)
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, g))
	s := checkpoint.NewStore(t.TempDir())
	require.NoError(t, os.WriteFile(s.Path(), compact.Bytes(), 0o600))
	got, err := s.Load(boot1)
	require.NoError(t, err)
	assert.Equal(t, state(boot1, 2), got)
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	s := checkpoint.NewStore(t.TempDir())
	f, err := os.Create(s.Path())
	require.NoError(t, err)
	require.NoError(t, f.Truncate(checkpoint.MaxSize+1))
	require.NoError(t, f.Close())
	_, err = s.Load(boot1)
	assert.ErrorIs(t, err, checkpoint.ErrCorrupt)
}

// TestUnreadable: an error that is not damage (here the checkpoint is a
// directory) is returned as such, and nothing is moved.
func TestUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := checkpoint.NewStore(dir)
	require.NoError(t, os.Mkdir(s.Path(), 0o700))
	got, err := s.Load(boot1)
	require.Error(t, err)
	assert.NotErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Nil(t, got)
	assert.Equal(t, []string{"checkpoint.json"}, listDir(t, dir))
}
