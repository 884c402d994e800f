package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// defaultDB is the log database of the demo and of the log commands: a
// file in the working directory.
const defaultDB = "loopchart.db"

// openDB opens the SQLite log at path. With mustExist, a file that does
// not exist is an error and nothing is created: commands that only read a
// log never leave an empty database behind.
func openDB(ctx context.Context, path string, mustExist bool) (*sqlite.Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: --db needs a file name", errUsage)
	}
	if mustExist {
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("no log database %s (loopchart demo --db %s writes one)", path, path)
		case err != nil:
			return nil, fmt.Errorf("log database %s: %w", path, err)
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("log database %s is not a regular file", path)
		}
	}
	return sqlite.Open(ctx, path, sqlite.Options{})
}

// sessions lists the sessions of st, most recently updated first.
func sessions(ctx context.Context, st store.Store) ([]store.Info, error) {
	var out []store.Info
	for in, err := range st.Sessions(ctx) {
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// findSession returns the Info of session id in st, or of the most
// recently updated session when id is empty. No such session, or no
// session at all, is an error with code log.no_session.
func findSession(ctx context.Context, st store.Store, db string, id vocab.ID) (store.Info, error) {
	all, err := sessions(ctx, st)
	if err != nil {
		return store.Info{}, err
	}
	if id == "" {
		if len(all) == 0 {
			return store.Info{}, vocab.Errorf(vocab.CodeNoSession, "%s holds no session", db)
		}
		return all[0], nil
	}
	for _, in := range all {
		if in.Session == id {
			return in, nil
		}
	}
	return store.Info{}, vocab.Errorf(vocab.CodeNoSession, "%s holds no session %s", db, id)
}

// closeEvent is the kind of the event that records a session's close
// (Service.Close): a session whose log holds one is finished and cannot
// be resumed.
var closeEvent = vocab.Input{Kind: vocab.InClose}.EventKind()

// finished reports whether session id of st was closed.
func finished(ctx context.Context, st store.Store, id vocab.ID) (bool, error) {
	seq, err := st.Latest(ctx, id, closeEvent)
	return seq > 0, err
}

// resumable returns the most recently updated session of st that has
// events and was not closed: the session an interrupted (Ctrl-C) or killed
// demo left behind.
func resumable(ctx context.Context, st store.Store, db string) (store.Info, error) {
	all, err := sessions(ctx, st)
	if err != nil {
		return store.Info{}, err
	}
	for _, in := range all {
		if in.Head == 0 {
			continue
		}
		done, err := finished(ctx, st, in.Session)
		if err != nil {
			return store.Info{}, err
		}
		if !done {
			return in, nil
		}
	}
	return store.Info{}, vocab.Errorf(vocab.CodeNoSession, "%s holds no unfinished session to resume (every session in it was closed)", db)
}
