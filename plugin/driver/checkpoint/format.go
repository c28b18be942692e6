package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// newerVersion reports a well-formed checkpoint whose version is later than
// Version. Only the version is read: a later format may have any content.
func newerVersion(data []byte) (int, bool) {
	var v struct {
		Version int `json:"version"`
	}
	if json.Unmarshal(data, &v) != nil || v.Version <= Version {
		return 0, false
	}
	return v.Version, true
}

// decode parses and checks a checkpoint file.
func decode(data []byte) (*State, error) {
	switch {
	case len(data) == 0:
		// Written by something else than Save, which never leaves an
		// empty file, even on a crash.
		return nil, errors.New("empty file")
	case len(data) > MaxSize:
		return nil, fmt.Errorf("larger than %d bytes", MaxSize)
	}
	var f file
	if err := strictUnmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Version < 1 || f.Version > Version {
		return nil, fmt.Errorf("version %d, want 1 to %d", f.Version, Version)
	}
	if len(f.Data) == 0 || bytes.Equal(f.Data, []byte("null")) {
		return nil, errors.New("no data")
	}
	st := &State{}
	if err := strictUnmarshal(f.Data, st); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	canon, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if sum := checksum(canon); sum != f.Checksum {
		return nil, fmt.Errorf("checksum %q, content has %q", f.Checksum, sum)
	}
	if st.Version != f.Version {
		return nil, fmt.Errorf("data has version %d, file %d", st.Version, f.Version)
	}
	if err := st.check(); err != nil {
		return nil, err
	}
	st.Version = Version
	if st.Claims == nil {
		st.Claims = map[string]Claim{}
	}
	return st, nil
}

// strictUnmarshal decodes one JSON value with no unknown field and
// nothing after it.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// check is what Save refuses to write and Load to read: a version other
// than 1 to Version, no boot ID, or a claim under another UID than its own.
func (st *State) check() error {
	if st.Version < 1 || st.Version > Version {
		return fmt.Errorf("state version %d, want 1 to %d", st.Version, Version)
	}
	if st.BootID == "" {
		return errors.New("no boot ID")
	}
	for uid, c := range st.Claims {
		if uid == "" || c.UID != uid {
			return fmt.Errorf("claim %q recorded under UID %q", c.UID, uid)
		}
	}
	return nil
}

// checksum is the hex SHA-256 of data.
func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sortedKeys are a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readBounded reads the checkpoint, but no more than MaxSize+1 bytes:
// enough for decode to tell a file that is too large. The file is
// returned open, for remember.
func (s *Store) readBounded() (*os.File, []byte, error) {
	open := os.Open
	if s.Open != nil {
		open = s.Open
	}
	f, err := open(s.path)
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, data, nil
}
