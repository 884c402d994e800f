//go:build !unix

package sqlite

import (
	"errors"
	"io/fs"
	"os"
)

// lockFile does nothing where there is no flock.
func lockFile(f *os.File) error { return nil }

// waitLockFile does nothing where there is no flock.
func waitLockFile(f *os.File) error { return nil }

// holderAlive cannot tell a live holder from a dead one without flock: a
// holder whose lock file exists is taken as alive (its sessions need a
// Release, or the file's removal, before another Store may claim them).
func (s *Store) holderAlive(holder string) (bool, error) {
	if !validHolder(holder) {
		return false, nil
	}
	_, err := os.Stat(s.holderFile(holder))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
