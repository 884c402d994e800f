//go:build unix

package sqlite

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f without waiting. The lock
// belongs to f's open file description: another open of the same file,
// in this process or another, cannot take it while f is open, and the
// kernel drops it when the process dies.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

// waitLockFile takes an exclusive flock on f, waiting for it.
func waitLockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

// holderAlive reports whether the Store holder still runs: whether its
// lock file is still locked. The file of a dead holder is removed.
func (s *Store) holderAlive(holder string) (bool, error) {
	if !validHolder(holder) {
		s.log.Warn("sqlite store: a session names a malformed holder; taken as dead", "holder", holder)
		return false, nil
	}
	name := s.holderFile(holder)
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // closed without releasing, or its file was removed
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	switch err := lockFile(f); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, err
	}
	// Dead: its lock is ours now. Remove the file while holding it.
	os.Remove(name)
	return false, nil
}
