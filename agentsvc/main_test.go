package agentsvc_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: every
// service a test or example starts must be closed, and Close must leave
// nothing behind.
func TestMain(m *testing.M) {
	if db := os.Getenv(hostCrashEnv); db != "" {
		os.Exit(runHostCrashChild(db))
	}
	goleak.VerifyTestMain(m)
}
