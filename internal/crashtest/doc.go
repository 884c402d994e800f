// Package crashtest kills a process that runs agent sessions on the SQLite
// store (adapters/store/sqlite) at random points and at the store's named
// failpoints, and checks after every kill that the store still opens, that
// every session folds and verifies (store.Fold, store.Verify), that
// everything the process acknowledged is in the file, that no batch of
// events is torn, and that the next process recovers the sessions
// (agentsvc.Open: interrupted tool calls get a result, the open turn ends
// interrupted, queued prompts stay queued and run after Continue).
//
// The process under test is the small program in the child directory,
// built once per test run without the race detector (go build, offline);
// it runs prompts through a slow streaming scripted provider and slow
// tools, steering and cancelling now and then, and reports over a pipe
// what it acknowledged (see Line), one JSON object per line, written only
// once the thing reported is durable, and each batch it hands to the
// store before the store has it. The test kills it after a random number
// of reports (right as a batch is handed over, after an append returned,
// an event was published, a prompt submitted), or the child kills itself
// at the n-th pass of one of the store's failpoints (sqlite
// Options.Failpoint: "before-commit", "after-commit", "mid-batch",
// "checkpoint"). Half the checks run on a copy of the files, so that the
// next child itself finds the write-ahead log its predecessor left.
//
// What this proves, and what it does not: a SIGKILL ends the process but
// not the machine, so the kernel's page cache survives it, and every
// write(2) that returned is seen by the next process whether or not it
// was fsynced. These tests therefore prove that commits are atomic (a
// batch is in the file whole or not at all, across the sessions of one
// group commit too), that nothing is acknowledged before its commit, that
// the write-ahead log left by a killed writer is recovered, and that
// session recovery closes what the dead process left open. They do not
// prove that a commit survives a power loss or a kernel crash: that rests
// on SQLite's fsync discipline (Options.Synchronous "FULL") and on the
// disk honouring flushes, which only pulling the plug (or a fault-injecting
// block device) can test.
//
// Run with -crash.seed=N to replay a schedule of kills (the seed is printed
// on failure, with the command that reproduces it; the schedule counts
// reports, so it replays exactly, while the child's timing, and so where
// in its work a report falls, does not), -crash.kills=N to change the
// number of random kills (50 by default, in rounds of 10 on a new file
// each, plus 5 at each failpoint), -crash.keep to keep the database files
// of a failed run.
package crashtest
