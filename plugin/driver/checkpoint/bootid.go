package checkpoint

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ReadBootID reads the kernel's boot ID, a random UUID made at each boot,
// from <procRoot>/sys/kernel/random/boot_id (procRoot is "/proc" on a live
// node). It checks that the content is a UUID and returns it in lower case.
func ReadBootID(procRoot string) (string, error) {
	path := filepath.Join(procRoot, bootIDFile)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("boot ID: %w", err)
	}
	defer f.Close()
	// A UUID and a newline; more is not a boot ID.
	data, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return "", fmt.Errorf("boot ID %s: %w", path, err)
	}
	id := strings.ToLower(strings.TrimSpace(string(data)))
	if !isUUID(id) {
		return "", fmt.Errorf("boot ID %s: %q is not a UUID", path, data)
	}
	return id, nil
}

// isUUID reports whether s is a UUID in lower-case 8-4-4-4-12 form.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
