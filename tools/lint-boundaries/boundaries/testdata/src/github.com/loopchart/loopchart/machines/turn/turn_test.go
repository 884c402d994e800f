package turn

import (
	"os"
	"sync"
	"testing"
	"time"
)

// Test files of machines are exempt from machines-pure, -no-goroutines and -no-clock.
func TestStep(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done() }()
	wg.Wait()
	var tt Turn
	if err := tt.Step(time.Now()); err != nil {
		t.Fatal(err)
	}
	_ = os.Getenv("X")
	time.Sleep(0)
}
