package agentsvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// The host crash tests run a Host on a SQLite file in a child process
// (this test binary, re-executed with hostCrashEnv set), which SIGKILLs
// itself at a chosen point of a fan-out; a Host in the test process then
// reopens the parent from the file and must account for every spawn.
const (
	hostCrashEnv   = "LOOPCHART_HOST_CRASH_DB"
	hostCrashAtEnv = "LOOPCHART_HOST_CRASH_AT"
)

// Where the child process kills itself:
//   - childOpen: the parent's spawn calls are durable, the first child's
//     session is being opened (between the spawn and the child's start);
//   - childModel: the first child runs its task (its first model request);
//   - queued: one child runs (it blocks), two are spawned and queued for a
//     running slot, and the parent asks the model what to do next.
const (
	crashChildOpen  = "child-open"
	crashChildModel = "child-model"
	crashQueued     = "queued"
)

// runHostCrashChild is the child process: it never returns normally; it
// kills itself at the point named by hostCrashAtEnv, or exits 3 when
// something fails first.
func runHostCrashChild(db string) int {
	at := os.Getenv(hostCrashAtEnv)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "host crash child: "+format+"\n", args...)
		return 3
	}
	die := func() {
		p, err := os.FindProcess(os.Getpid())
		if err == nil {
			_ = p.Kill() // SIGKILL: no deferred function, no Close runs
		}
		select {}
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		return fail("open store: %v", err)
	}
	o := agentsvc.HostOptions{Store: st}
	if at == crashQueued {
		o.MaxRunningSubAgents = 1
	}
	var parentAsked atomic.Int32
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			parent := parentProvider(nil)
			return agentsvc.Options{NoRunTimeout: true, Provider: replies(func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
				if parentAsked.Add(1) == 2 && at == crashQueued {
					die()
				}
				return parent(ctx, req)
			})}, nil
		}
		if at == crashChildOpen {
			die()
		}
		child := childProvider(nil, info.ID, nil)
		return agentsvc.Options{NoRunTimeout: true, Provider: replies(func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
			if at == crashChildModel {
				die()
			}
			return child(ctx, req)
		})}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		return fail("host: %v", err)
	}
	p, err := h.Open(ctx, "p")
	if err != nil {
		return fail("open parent: %v", err)
	}
	prompt := "spawn a b c wait"
	if at == crashQueued {
		prompt = "spawn block b c wait"
	}
	if _, err := p.SubmitText(prompt); err != nil {
		return fail("submit: %v", err)
	}
	select {} // the kill comes from a provider or the Session function
}

// A process running a fan-out is SIGKILLed between a spawn and its
// child's start, while a child runs, and while children are queued for
// a running slot. A new host reopening the parent from the file accounts
// for every spawn: each child the parent was told about (a spawn result
// that is not an error) is heard of exactly once (a delivery or an
// agents_wait result), a child whose spawn was cut off is heard of at
// most once, no child runs afterwards, and every session's log verifies.
func TestHostRecoversLinksAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, at := range []string{crashChildOpen, crashChildModel, crashQueued} {
		t.Run(at, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "host.db")
			killHostAt(t, db, at)
			checkHostRecovery(t, db)
		})
	}
}

// killHostAt runs the child process until it kills itself at point at.
func killHostAt(t *testing.T, db, at string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostCrashEnv+"="+db, hostCrashAtEnv+"="+at)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the child never reached %s (stderr: %s)", at, stderr.String())
	}
	if err == nil || cmd.ProcessState.ExitCode() != -1 {
		t.Fatalf("the child was not killed at %s: %v (stderr: %s)", at, err, stderr.String())
	}
}

// checkHostRecovery reopens the parent on a new host with well-behaved
// providers, lets it finish, and checks what every spawn became.
func checkHostRecovery(t *testing.T, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	o := agentsvc.HostOptions{Store: st}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true}, nil
		}
		return agentsvc.Options{NoRunTimeout: true, Provider: replies(func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
			return "answer(" + firstUser(req).Text() + ")", nil, nil
		})}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = h.Close(context.Background())
		}
	}()
	p, err := h.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Continue(); err != nil {
		t.Fatal(err)
	}

	// The spawns the parent's log holds, and what their calls returned.
	told := map[vocab.ID]bool{} // child id → the parent was told it runs
	spawnsOf := func() {
		for _, m := range transcriptOf(t, p) {
			if m.Role != vocab.RoleTool || m.Result == nil || m.Result.Name != agentsvc.ToolSpawn {
				continue
			}
			if id := childIn(m.Text()); id != "" && !m.Result.IsError {
				told[id] = true
			}
		}
	}
	spawnsOf()
	// Every child the store holds with a task, plus those the parent
	// was told of, must end and be heard of.
	want := map[vocab.ID]bool{}
	for id := range told {
		want[id] = true
	}
	for info, err := range st.Sessions(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if agentsvc.ParentOf(info.Session) == "p" {
			if _, err := st.Latest(ctx, info.Session, vocab.EventPrompt); err == nil {
				want[info.Session] = true
			}
		}
	}
	heard := func() map[vocab.ID]int {
		n := map[vocab.ID]int{}
		for _, m := range transcriptOf(t, p) {
			if m.Role == vocab.RoleUser || m.Role == vocab.RoleTool && m.Result != nil && m.Result.Name == agentsvc.ToolWait {
				for _, id := range deliveredIn(m.Text()) {
					n[id]++
				}
			}
		}
		return n
	}
	// Follow the parent's events until every wanted child was heard of
	// and the parent rests.
	all := func(n map[vocab.ID]int) bool {
		for id := range want {
			if n[id] == 0 {
				return false
			}
		}
		return true
	}
	for _, err := range p.Events(ctx, 0) {
		if err != nil {
			t.Fatalf("%v; heard %v of %v", err, heard(), want)
		}
		if all(heard()) {
			break
		}
	}
	if err := p.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	spawnsOf()
	n := heard()
	for id := range told {
		if n[id] != 1 {
			t.Errorf("child %s, whose spawn the parent was told of, heard of %d times", id, n[id])
		}
	}
	for id, k := range n {
		if k > 1 {
			t.Errorf("child %s heard of %d times", id, k)
		}
	}
	for id := range want {
		if !told[id] && n[id] == 0 {
			t.Errorf("child %s has a task but the parent never heard of it", id)
		}
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	for info, err := range st.Sessions(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Verify(ctx, st, info.Session); err != nil {
			t.Errorf("session %s: %v", info.Session, err)
		}
		if agentsvc.ParentOf(info.Session) == "p" {
			if state, _ := taskStateIn(ctx, t, st, info.Session); state == "running" || state == "queued" {
				t.Errorf("child %s still %s after the host closed", info.Session, state)
			}
		}
	}
	t.Logf("spawns the parent was told of: %d; children heard of: %v", len(told), n)
}

var (
	childIDRe  = regexp.MustCompile(`p/sub-[0-9a-f]+`)
	deliveryRe = regexp.MustCompile(`\[subagent (?:completed|failed|cancelled)\] (p/sub-[0-9a-f]+)`)
)

func childIn(text string) vocab.ID { return vocab.ID(childIDRe.FindString(text)) }

func deliveredIn(text string) []vocab.ID {
	var ids []vocab.ID
	for _, m := range deliveryRe.FindAllStringSubmatch(text, -1) {
		ids = append(ids, vocab.ID(m[1]))
	}
	return ids
}

// taskStateIn reads the last state a child's task prompt logged.
func taskStateIn(ctx context.Context, t *testing.T, st store.Store, id vocab.ID) (state, detail string) {
	t.Helper()
	for r, err := range st.Read(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != vocab.EventPrompt {
			continue
		}
		var p vocab.PromptPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(string(p.Prompt), "/task") {
			state, detail = p.State, p.Detail
		}
	}
	return state, detail
}
