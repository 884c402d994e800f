//go:build !race

package crashtest

// raceEnabled: this test binary was built with -race (the child never is).
const raceEnabled = false
