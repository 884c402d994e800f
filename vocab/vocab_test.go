package vocab_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/oklog/ulid/v2"

	"github.com/loopchart/loopchart/vocab"
)

// ---------------------------------------------------------------------------
// IDs

func TestSeqSource(t *testing.T) {
	t0 := time.UnixMilli(0)
	var s vocab.SeqSource
	if got := s.NewID(t0); got != "00000000000000000000000001" {
		t.Errorf("first ID at epoch = %s", got)
	}
	if got := s.NewID(t0); got != "00000000000000000000000002" {
		t.Errorf("second ID at epoch = %s", got)
	}

	// Deterministic: two sources given the same times make the same IDs.
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var a, b vocab.SeqSource
	var prev vocab.ID
	for n := uint64(1); n <= 300; n++ {
		ts := at.Add(time.Duration(n/3) * time.Millisecond) // time moves every third ID
		id := a.NewID(ts)
		if other := b.NewID(ts); other != id {
			t.Fatalf("#%d: %s != %s", n, id, other)
		}
		if id <= prev {
			t.Fatalf("#%d: %s does not sort after %s", n, id, prev)
		}
		prev = id
		if _, err := vocab.ParseID(string(id)); err != nil {
			t.Fatalf("ParseID(%s): %v", id, err)
		}
		u := ulid.MustParseStrict(string(id))
		if u.Time() != uint64(ts.UnixMilli()) {
			t.Fatalf("#%d: time %d, want %d", n, u.Time(), ts.UnixMilli())
		}
		if e := u.Entropy(); binary.BigEndian.Uint64(e[2:]) != n || e[0] != 0 || e[1] != 0 {
			t.Fatalf("#%d: entropy %x, want n", n, e)
		}
	}
}

func TestSeqSourceConcurrent(t *testing.T) {
	var s vocab.SeqSource
	at := time.UnixMilli(1_700_000_000_000)
	const workers, each = 8, 100
	ids := make(chan vocab.ID, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				ids <- s.NewID(at)
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[vocab.ID]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("duplicate %s", id)
		}
		seen[id] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("%d ids", len(seen))
	}
	if next := s.NewID(at); ulid.MustParse(string(next)).Entropy()[9] != byte((workers*each+1)%256) {
		t.Errorf("counter skipped: %s", next)
	}
}

func TestULIDSourceMonotonic(t *testing.T) {
	s := vocab.NewULIDSource(nil)
	at := time.Date(2025, 3, 1, 12, 0, 0, 500, time.UTC)
	var prev vocab.ID
	for i := range 1000 {
		id := s.NewID(at) // the same millisecond every time
		if id <= prev {
			t.Fatalf("#%d: %s does not sort after %s", i, id, prev)
		}
		prev = id
		got, err := vocab.ParseID(string(id))
		if err != nil || got != id {
			t.Fatalf("ParseID(%s) = %s, %v", id, got, err)
		}
		if ms := ulid.MustParseStrict(string(id)).Time(); ms != uint64(at.UnixMilli()) {
			t.Fatalf("time %d, want %d", ms, at.UnixMilli())
		}
	}
	if next := s.NewID(at.Add(time.Millisecond)); next <= prev {
		t.Errorf("next millisecond %s does not sort after %s", next, prev)
	}
}

func TestULIDSourceConcurrent(t *testing.T) {
	s := vocab.NewULIDSource(nil)
	at := time.UnixMilli(1_700_000_000_000)
	const workers, each = 8, 200
	ids := make(chan vocab.ID, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				ids <- s.NewID(at)
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[vocab.ID]bool{}
	for id := range ids {
		if _, err := vocab.ParseID(string(id)); err != nil || seen[id] {
			t.Fatalf("bad or duplicate id %s: %v", id, err)
		}
		seen[id] = true
	}
}

func TestULIDSourceDeterministicReader(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	a := vocab.NewULIDSource(rand.New(rand.NewSource(7)))
	b := vocab.NewULIDSource(rand.New(rand.NewSource(7)))
	for i := range 50 {
		if x, y := a.NewID(at), b.NewID(at); x != y {
			t.Fatalf("#%d: %s != %s", i, x, y)
		}
	}
}

func TestULIDSourceEntropyFailure(t *testing.T) {
	s := vocab.NewULIDSource(iotest.ErrReader(errors.New("no entropy")))
	at := time.UnixMilli(1_700_000_000_123)
	id := s.NewID(at)
	u, err := ulid.ParseStrict(string(id))
	if err != nil {
		t.Fatalf("fallback ID %s: %v", id, err)
	}
	if u.Time() != uint64(at.UnixMilli()) || u.Entropy()[0]|u.Entropy()[9] != 0 {
		t.Errorf("fallback ID %s: time %d entropy %x", id, u.Time(), u.Entropy())
	}
}

func TestParseID(t *testing.T) {
	good := "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	if id, err := vocab.ParseID(good); err != nil || id != vocab.ID(good) {
		t.Fatalf("ParseID(%s) = %s, %v", good, id, err)
	}
	for _, bad := range []string{
		"",
		"short",
		good[:25],                    // too short
		good + "0",                   // too long
		"01ARZ3NDEKTSV4RRFFQ69G5FAU", // U is not Crockford base32
		"01ARZ3NDEKTSV4RRFFQ69G5FA!",
		"8ZZZZZZZZZZZZZZZZZZZZZZZZZ", // overflows 128 bits
		" 1ARZ3NDEKTSV4RRFFQ69G5FAV",
	} {
		t.Run(bad, func(t *testing.T) {
			id, err := vocab.ParseID(bad)
			if err == nil || id != "" {
				t.Fatalf("ParseID(%q) = %q, %v; want an error", bad, id, err)
			}
			var ve *vocab.Error
			if !errors.As(err, &ve) || ve.Code != vocab.CodeBadInput || vocab.CodeOf(err) != vocab.CodeBadInput {
				t.Errorf("error %v (%T) has code %s, want %s", err, err, vocab.CodeOf(err), vocab.CodeBadInput)
			}
			if !errors.Is(err, vocab.CodeBadInput.Err()) || !strings.HasPrefix(err.Error(), "input.bad: bad id "+fmt.Sprintf("%q", bad)) {
				t.Errorf("error %q", err)
			}
			if ve != nil && ve.Retryable {
				t.Errorf("bad input is retryable")
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Errors

func TestErrorString(t *testing.T) {
	tests := []struct {
		err  *vocab.Error
		want string
	}{
		{&vocab.Error{Code: vocab.CodeClosed}, "agent.closed"},
		{&vocab.Error{Code: vocab.CodeClosed, Message: "bye"}, "agent.closed: bye"},
		{&vocab.Error{Code: vocab.CodeTransport, Cause: io.ErrUnexpectedEOF}, "llm.transport: unexpected EOF"},
		{&vocab.Error{Code: vocab.CodeTransport, Message: "stream broke", Cause: io.ErrUnexpectedEOF}, "llm.transport: stream broke"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := vocab.Errorf(vocab.CodeToolFailed, "boom")
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"code sentinel", err, vocab.CodeToolFailed.Err(), true},
		{"other code sentinel", err, vocab.CodeToolDenied.Err(), false},
		{"same code same message", err, &vocab.Error{Code: vocab.CodeToolFailed, Message: "boom"}, true},
		{"same code other message", err, &vocab.Error{Code: vocab.CodeToolFailed, Message: "bang"}, false},
		{"other code same message", err, &vocab.Error{Code: vocab.CodeToolDenied, Message: "boom"}, false},
		{"plain error with the same text", err, errors.New("tool.failed: boom"), false},
		{"wrapped", fmt.Errorf("running: %w", err), vocab.CodeToolFailed.Err(), true},
		{"sentinel is its code", vocab.CodeClosed.Err(), vocab.CodeClosed.Err(), true},
		{"sentinel vs an error with a message", vocab.CodeClosed.Err(), vocab.Errorf(vocab.CodeClosed, "x"), false},
		{"cause reachable", vocab.Errorf(vocab.CodeHook, "hook: %w", io.EOF), io.EOF, true},
		{"status error by code", vocab.StatusError(429, 0, "slow down"), vocab.CodeRateLimited.Err(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
	// Code.Err makes a fresh value each time; matching is by code, not identity.
	if vocab.CodeClosed.Err() == vocab.CodeClosed.Err() {
		t.Errorf("Err returns a shared pointer")
	}
}

func TestErrorf(t *testing.T) {
	cause := vocab.Errorf(vocab.CodeToolDenied, "no")
	err := vocab.Errorf(vocab.CodeHook, "hook %s: %w", "audit", cause)
	if err.Code != vocab.CodeHook || err.Message != "hook audit: tool.denied: no" || err.Cause != cause {
		t.Errorf("Errorf = %+v", err)
	}
	if errors.Unwrap(err) != cause || !errors.Is(err, vocab.CodeToolDenied.Err()) || !errors.Is(err, vocab.CodeHook.Err()) {
		t.Errorf("Errorf lost its cause: %v", err)
	}
	if got := err.Error(); got != "hook.failed: hook audit: tool.denied: no" {
		t.Errorf("Error() = %q", got)
	}
	// CodeOf takes the outermost code.
	if vocab.CodeOf(err) != vocab.CodeHook {
		t.Errorf("CodeOf = %s", vocab.CodeOf(err))
	}
	var inner *vocab.Error
	if !errors.As(errors.Unwrap(err), &inner) || inner.Code != vocab.CodeToolDenied {
		t.Errorf("inner = %v", inner)
	}

	plain := vocab.Errorf(vocab.CodeBadInput, "bad %d", 3)
	if plain.Cause != nil || plain.Message != "bad 3" || errors.Unwrap(plain) != nil {
		t.Errorf("Errorf without %%w = %+v", plain)
	}
	ctxErr := vocab.Errorf(vocab.CodeTransport, "read: %w", context.Canceled)
	if !errors.Is(ctxErr, context.Canceled) || vocab.CodeOf(ctxErr) != vocab.CodeTransport {
		t.Errorf("Errorf(%%w context.Canceled) = %v, code %s", ctxErr, vocab.CodeOf(ctxErr))
	}
}

func TestCodeOf(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(vocab.CancelCause{Kind: vocab.CancelUser})
	tests := []struct {
		name string
		err  error
		want vocab.Code
	}{
		{"nil", nil, ""},
		{"vocab error", vocab.Errorf(vocab.CodeClosed, "closed"), vocab.CodeClosed},
		{"sentinel", vocab.CodeNotIdle.Err(), vocab.CodeNotIdle},
		{"wrapped vocab error", fmt.Errorf("submit: %w", vocab.Errorf(vocab.CodeAgentBusy, "busy")), vocab.CodeAgentBusy},
		{"joined: first vocab error", errors.Join(errors.New("x"), vocab.CodeBlocked.Err()), vocab.CodeBlocked},
		{"context.Canceled", context.Canceled, vocab.CodeCancelled},
		{"wrapped context.Canceled", fmt.Errorf("stream: %w", context.Canceled), vocab.CodeCancelled},
		{"ctx.Err of a cancelled context", ctx.Err(), vocab.CodeCancelled},
		{"context.DeadlineExceeded", context.DeadlineExceeded, vocab.CodeCancelled},
		{"cancel cause", context.Cause(ctx), vocab.CodeCancelled},
		{"wrapped cancel cause", fmt.Errorf("hook: %w", context.Cause(ctx)), vocab.CodeCancelled},
		{"plain error", errors.New("boom"), vocab.CodeInternal},
		{"io.EOF", io.EOF, vocab.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vocab.CodeOf(tt.err); got != tt.want {
				t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// codedErr carries a code the way the machines' typed errors do, without
// being a *vocab.Error.
type codedErr struct{ code vocab.Code }

func (e codedErr) Error() string         { return "coded " + string(e.code) }
func (e codedErr) ErrorCode() vocab.Code { return e.code }

func TestCodeOfErrorCoder(t *testing.T) {
	var nilErr *vocab.Error
	tests := []struct {
		name string
		err  error
		want vocab.Code
	}{
		{"coder", codedErr{vocab.CodeGuardRejected}, vocab.CodeGuardRejected},
		{"wrapped coder", fmt.Errorf("fire: %w", codedErr{vocab.CodeUnhandledTrigger}), vocab.CodeUnhandledTrigger},
		{"coder deep in the chain", fmt.Errorf("a: %w", fmt.Errorf("b: %w", codedErr{vocab.CodeStale})), vocab.CodeStale},
		{"outermost wins: coder", vocab.Errorf(vocab.CodeHook, "hook: %w", codedErr{vocab.CodeGuardPanicked}), vocab.CodeHook},
		{"joined: the first coded error wins", errors.Join(codedErr{vocab.CodeDropped}, vocab.CodeClosed.Err()), vocab.CodeDropped},
		{"empty code falls through to cancellation", fmt.Errorf("%w: %w", codedErr{""}, context.Canceled), vocab.CodeCancelled},
		{"empty code falls through to internal", codedErr{""}, vocab.CodeInternal},
		{"typed nil *Error", nilErr, vocab.CodeInternal},
		{"wrapped typed nil *Error", fmt.Errorf("x: %w", nilErr), vocab.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vocab.CodeOf(tt.err); got != tt.want {
				t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestNilError(t *testing.T) {
	var e *vocab.Error
	var err error = e // a typed nil: err != nil
	wrapped := fmt.Errorf("provider: %w", err)
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("a nil *vocab.Error panicked: %v", r)
			}
		}()
		if got := e.Error(); got != "internal: nil *vocab.Error" {
			t.Errorf("Error() = %q", got)
		}
		if e.Unwrap() != nil || errors.Unwrap(err) != nil {
			t.Errorf("Unwrap() = %v", e.Unwrap())
		}
		if e.ErrorCode() != vocab.CodeInternal {
			t.Errorf("ErrorCode() = %q", e.ErrorCode())
		}
		if !errors.Is(err, vocab.CodeInternal.Err()) || !errors.Is(wrapped, vocab.CodeInternal.Err()) {
			t.Errorf("a nil *Error does not match the internal sentinel")
		}
		if errors.Is(err, vocab.CodeClosed.Err()) || errors.Is(wrapped, vocab.Errorf(vocab.CodeInternal, "x")) || errors.Is(wrapped, io.EOF) {
			t.Errorf("a nil *Error matches an unrelated error")
		}
		// A nil *Error as the target, and as the error, is never a panic either.
		if errors.Is(vocab.CodeClosed.Err(), err) || errors.Is(wrapped, vocab.CodeClosed.Err()) {
			t.Errorf("typed-nil target matched")
		}
		if !errors.Is(err, err) {
			t.Errorf("errors.Is(nil *Error, itself) = false")
		}
		if !strings.Contains(wrapped.Error(), "nil *vocab.Error") {
			t.Errorf("wrapped = %q", wrapped)
		}
		_ = fmt.Sprintf("%v %+v %s", e, e, err)
	}()
}

func TestAsError(t *testing.T) {
	var nilErr *vocab.Error
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(vocab.CancelCause{Kind: vocab.CancelUser})
	rate := vocab.StatusError(429, 2*time.Second, "slow down")
	wrappedRate := fmt.Errorf("stream: %w", rate)
	tests := []struct {
		name      string
		err       error
		same      *vocab.Error // want exactly this pointer back
		code      vocab.Code
		message   string
		retryable bool
		cause     bool // the result's Cause is err
	}{
		{name: "vocab error", err: rate, same: rate, code: vocab.CodeRateLimited, message: "slow down", retryable: true},
		{name: "wrapped vocab error", err: wrappedRate, same: rate, code: vocab.CodeRateLimited, message: "slow down", retryable: true},
		{name: "first vocab error", err: vocab.Errorf(vocab.CodeSyntax, "bad: %w", rate), code: vocab.CodeSyntax, message: "bad: llm.rate_limited: slow down"},
		{name: "typed nil", err: nilErr, code: vocab.CodeInternal, message: "a nil *vocab.Error was returned as an error"},
		{name: "wrapped typed nil", err: fmt.Errorf("x: %w", nilErr), code: vocab.CodeInternal, message: "a nil *vocab.Error was returned as an error"},
		{name: "context.Canceled", err: context.Canceled, code: vocab.CodeCancelled, message: "context canceled", cause: true},
		{name: "wrapped deadline", err: fmt.Errorf("read: %w", context.DeadlineExceeded), code: vocab.CodeCancelled, message: "read: context deadline exceeded", cause: true},
		{name: "cancel cause", err: context.Cause(ctx), code: vocab.CodeCancelled, message: "cancelled by user", cause: true},
		{name: "plain error", err: io.ErrUnexpectedEOF, code: vocab.CodeTransport, message: "unexpected EOF", retryable: true, cause: true},
		{name: "wrapped plain error", err: fmt.Errorf("dial: %w", io.EOF), code: vocab.CodeTransport, message: "dial: EOF", retryable: true, cause: true},
		{name: "coder that is not a vocab error", err: codedErr{vocab.CodeGuardRejected}, code: vocab.CodeTransport, message: "coded machine.guard_rejected", retryable: true, cause: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := vocab.AsError(tt.err)
			if got == nil {
				t.Fatalf("AsError(%v) = nil", tt.err)
			}
			if tt.same != nil && got != tt.same {
				t.Errorf("AsError returned %p, want the chain's *Error %p", got, tt.same)
			}
			if got.Code != tt.code || got.Message != tt.message || got.Retryable != tt.retryable {
				t.Errorf("AsError(%v) = %+v, want code %s message %q retryable %v", tt.err, got, tt.code, tt.message, tt.retryable)
			}
			if tt.cause && got.Cause != tt.err {
				t.Errorf("Cause = %v, want %v", got.Cause, tt.err)
			}
			if tt.cause && !errors.Is(got, tt.err) {
				t.Errorf("errors.Is(AsError(err), err) = false")
			}
			if tt.code == vocab.CodeInternal && got.Cause != nil {
				t.Errorf("a nil *Error's replacement has cause %v", got.Cause)
			}
		})
	}
	if got := vocab.AsError(nil); got != nil {
		t.Errorf("AsError(nil) = %v", got)
	}
	// A context error keeps matching context.Canceled through the result.
	if got := vocab.AsError(ctx.Err()); !errors.Is(got, context.Canceled) || got.Retryable {
		t.Errorf("AsError(ctx.Err()) = %+v", got)
	}
}

func TestErrorJSON(t *testing.T) {
	in := vocab.PromptResult{Kind: vocab.PromptFailed, Steps: 2, Err: &vocab.Error{
		Code: vocab.CodeServer, Message: "overloaded", Retryable: true,
		RetryAfter: 1500 * time.Millisecond, Status: 503, Cause: io.ErrUnexpectedEOF,
	}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"kind":"failed","steps":2,"error":{"code":"llm.server","message":"overloaded","retryable":true,"retryAfter":1500000000,"status":503}}`
	if string(data) != want {
		t.Errorf("Marshal = %s\nwant      %s", data, want)
	}
	var out vocab.PromptResult
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("Unmarshal(%s): %v", data, err)
	}
	in.Err.Cause = nil // the cause is not encoded
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// Zero optional fields are left out; the code and message are always there.
	data, err = json.Marshal(&vocab.Error{Code: vocab.CodeClosed})
	if err != nil || string(data) != `{"code":"agent.closed","message":""}` {
		t.Errorf("Marshal(minimal) = %s, %v", data, err)
	}
	// A cause in the input (say, from an older writer) does not break decoding.
	var e vocab.Error
	if err := json.Unmarshal([]byte(`{"code":"llm.server","message":"m","Cause":{"x":1}}`), &e); err != nil || e.Code != vocab.CodeServer || e.Cause != nil {
		t.Errorf("Unmarshal with a cause = %+v, %v", e, err)
	}
}

func TestNewCodes(t *testing.T) {
	// Codes are a public contract: their text never changes.
	for code, want := range map[vocab.Code]string{
		vocab.CodeGuardPanicked: "machine.guard_panicked",
		vocab.CodeDuplicateID:   "input.duplicate_id",
		vocab.CodeStale:         "input.stale",
		vocab.CodeNotQueued:     "input.not_queued",
		vocab.CodeAppendFailed:  "log.append_failed",
		vocab.CodeReentrant:     "agent.reentrant",
		vocab.CodeStuck:         "agent.stuck",
		vocab.CodeProviderError: "llm.provider_error",
		vocab.CodeAborted:       "llm.aborted",
		vocab.CodeDropped:       "events.dropped",
	} {
		if string(code) != want {
			t.Errorf("code %q, want %q", code, want)
		}
		if vocab.CodeOf(vocab.Errorf(code, "x")) != code || !errors.Is(vocab.Errorf(code, "x"), code.Err()) {
			t.Errorf("code %s does not round-trip through CodeOf / errors.Is", code)
		}
	}
}

func TestStatusError(t *testing.T) {
	tests := []struct {
		status    int
		code      vocab.Code
		retryable bool
	}{
		{408, vocab.CodeTimeout, true},
		{409, vocab.CodeRequestRejected, true},
		{429, vocab.CodeRateLimited, true},
		{500, vocab.CodeServer, true},
		{502, vocab.CodeServer, true},
		{503, vocab.CodeServer, true},
		{504, vocab.CodeServer, true},
		{529, vocab.CodeRateLimited, true},
		{400, vocab.CodeRequestRejected, false},
		{401, vocab.CodeAuth, false},
		{402, vocab.CodeQuotaExhausted, false},
		{403, vocab.CodeAuth, false},
		{404, vocab.CodeModelNotFound, false},
		{413, vocab.CodeContextOverflow, false},
		{422, vocab.CodeRequestRejected, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			e := vocab.StatusError(tt.status, 3*time.Second, "provider says no")
			want := &vocab.Error{Code: tt.code, Message: "provider says no", Retryable: tt.retryable, RetryAfter: 3 * time.Second, Status: tt.status}
			if diff := cmp.Diff(want, e); diff != "" {
				t.Errorf("StatusError(%d) (-want +got):\n%s", tt.status, diff)
			}
			if !errors.Is(e, tt.code.Err()) || vocab.CodeOf(e) != tt.code {
				t.Errorf("StatusError(%d) does not match its code", tt.status)
			}
			if got, want := e.Error(), string(tt.code)+": provider says no"; got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
		})
	}
	// Everything outside the list is not retryable, server errors included.
	for _, status := range []int{0, 200, 301, 418, 501, 505, 599} {
		if vocab.StatusError(status, 0, "").Retryable {
			t.Errorf("status %d is retryable", status)
		}
	}
}

// ---------------------------------------------------------------------------
// Reasons

func TestCancelCause(t *testing.T) {
	tests := []struct {
		c      vocab.CancelCause
		str    string
		errStr string
	}{
		{vocab.CancelCause{Kind: vocab.CancelUser}, "user", "cancelled by user"},
		{vocab.CancelCause{Kind: vocab.CancelParent}, "parent", "cancelled by parent"},
		{vocab.CancelCause{Kind: vocab.CancelHook, Reason: "too long"}, "hook(too long)", "cancelled by hook(too long)"},
		{vocab.CancelCause{Kind: vocab.CancelDisposed}, "disposed", "cancelled by disposed"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			if tt.c.String() != tt.str || tt.c.Error() != tt.errStr {
				t.Errorf("String/Error = %q / %q, want %q / %q", tt.c.String(), tt.c.Error(), tt.str, tt.errStr)
			}
			if !errors.Is(tt.c, vocab.CodeCancelled.Err()) {
				t.Errorf("errors.Is(%v, CodeCancelled.Err()) = false", tt.c)
			}
			if errors.Is(tt.c, vocab.CodeClosed.Err()) || errors.Is(tt.c, vocab.Errorf(vocab.CodeCancelled, "other")) || errors.Is(tt.c, context.Canceled) {
				t.Errorf("%v matches an unrelated error", tt.c)
			}
			// As the cause of a cancelled context.
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(tt.c)
			cause := context.Cause(ctx)
			if !errors.Is(cause, vocab.CodeCancelled.Err()) || !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("context cause %v", cause)
			}
			var got vocab.CancelCause
			if !errors.As(cause, &got) || got != tt.c {
				t.Errorf("errors.As(cause) = %v", got)
			}
		})
	}
}

func TestTurnEndString(t *testing.T) {
	tests := []struct {
		e    vocab.TurnEnd
		want string
	}{
		{vocab.TurnEnd{Kind: vocab.EndCompleted}, "completed"},
		{vocab.TurnEnd{Kind: vocab.EndBlocked}, "blocked"},
		{vocab.TurnEnd{Kind: vocab.EndMaxTokens}, "max-tokens"},
		{vocab.TurnEnd{Kind: vocab.EndInterrupted}, "interrupted"},
		{vocab.TurnEnd{Kind: vocab.EndAborted, Cause: &vocab.CancelCause{Kind: vocab.CancelUser}}, "aborted{user}"},
		{vocab.TurnEnd{Kind: vocab.EndAborted, Cause: &vocab.CancelCause{Kind: vocab.CancelHook, Reason: "budget"}}, "aborted{hook(budget)}"},
		{vocab.TurnEnd{Kind: vocab.EndAborted}, "aborted"},
		{vocab.TurnEnd{Kind: vocab.EndError, Code: vocab.CodeServer, Message: "503"}, "error{llm.server: 503}"},
	}
	for _, tt := range tests {
		if got := tt.e.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestPromptResultString(t *testing.T) {
	tests := []struct {
		r    vocab.PromptResult
		want string
	}{
		{vocab.PromptResult{Kind: vocab.PromptCompleted, Steps: 2}, "completed{steps=2}"},
		{vocab.PromptResult{Kind: vocab.PromptCompleted, Steps: 1, Truncated: true}, "completed{steps=1 truncated}"},
		{vocab.PromptResult{Kind: vocab.PromptCompleted, Steps: 3, Truncated: true, StopReason: "done"}, "completed{steps=3 truncated stop=done}"},
		{vocab.PromptResult{Kind: vocab.PromptCompleted, StopReason: "hook"}, "completed{steps=0 stop=hook}"},
		{vocab.PromptResult{Kind: vocab.PromptFailed, Steps: 4, Err: vocab.Errorf(vocab.CodeServer, "boom")}, "failed{steps=4 error=llm.server: boom}"},
		{vocab.PromptResult{Kind: vocab.PromptCancelled, Steps: 1, Reason: &vocab.CancelCause{Kind: vocab.CancelUser}}, "cancelled{steps=1 reason=user}"},
		{vocab.PromptResult{Kind: vocab.PromptCancelled}, "cancelled{steps=0 reason=}"},
		{vocab.PromptResult{Kind: vocab.PromptBlocked}, "blocked"},
		{vocab.PromptResult{Kind: vocab.PromptBlocked, Detail: "policy"}, "blocked{policy}"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestFinishReasonValid(t *testing.T) {
	for _, f := range []vocab.FinishReason{vocab.FinishStop, vocab.FinishToolCalls, vocab.FinishMaxTokens, vocab.FinishError, vocab.FinishAborted, vocab.FinishFiltered} {
		if !f.Valid() {
			t.Errorf("%q is not valid", f)
		}
	}
	for _, f := range []vocab.FinishReason{"", "STOP", "length", "tool_calls", "stop "} {
		if f.Valid() {
			t.Errorf("%q is valid", f)
		}
	}
}

// ---------------------------------------------------------------------------
// Messages

func TestMessage(t *testing.T) {
	call1 := &vocab.ToolCall{ID: "c1", Name: "read", Args: json.RawMessage(`{"path":"a"}`)}
	call2 := &vocab.ToolCall{ID: "c2", Name: "write"}
	text := func(s string) vocab.Part { return vocab.Part{Kind: vocab.PartText, Text: s} }
	think := func(s string) vocab.Part { return vocab.Part{Kind: vocab.PartThinking, Text: s} }
	call := func(c *vocab.ToolCall) vocab.Part { return vocab.Part{Kind: vocab.PartToolCall, Call: c} }
	tests := []struct {
		name  string
		m     vocab.Message
		text  string
		calls []vocab.ToolCall
		empty bool
	}{
		{name: "no parts", m: vocab.Message{Role: vocab.RoleAssistant}, empty: true},
		{name: "thinking only", m: vocab.Message{Parts: []vocab.Part{think("hmm")}}, empty: true},
		{name: "whitespace text", m: vocab.Message{Parts: []vocab.Part{text(" \n\t"), think("x"), text("")}}, text: " \n\t", empty: true},
		{name: "text", m: vocab.Message{Parts: []vocab.Part{think("plan"), text("hello"), text(" world")}}, text: "hello world"},
		{name: "whitespace then text", m: vocab.Message{Parts: []vocab.Part{text(" "), text("x")}}, text: " x"},
		{name: "tool call only", m: vocab.Message{Parts: []vocab.Part{call(call1)}}, calls: []vocab.ToolCall{*call1}},
		{name: "thinking and tool calls in order", m: vocab.Message{Parts: []vocab.Part{think("t"), call(call2), text("ok"), call(call1)}},
			text: "ok", calls: []vocab.ToolCall{*call2, *call1}},
		{name: "user text", m: vocab.UserText("hi"), text: "hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Text(); got != tt.text {
				t.Errorf("Text() = %q, want %q", got, tt.text)
			}
			if diff := cmp.Diff(tt.calls, tt.m.ToolCalls()); diff != "" {
				t.Errorf("ToolCalls (-want +got):\n%s", diff)
			}
			if got := tt.m.HasToolCalls(); got != (len(tt.calls) > 0) {
				t.Errorf("HasToolCalls() = %v", got)
			}
			if got := tt.m.IsEmptyReply(); got != tt.empty {
				t.Errorf("IsEmptyReply() = %v, want %v", got, tt.empty)
			}
		})
	}

	// ToolCalls copies: editing the result leaves the message alone.
	m := vocab.Message{Parts: []vocab.Part{call(call1)}}
	calls := m.ToolCalls()
	calls[0].Name = "changed"
	if m.Parts[0].Call.Name != "read" {
		t.Errorf("ToolCalls aliases the message")
	}
	// ToolMessage copies the result.
	r := vocab.ToolResult{CallID: "c9", Content: "x"}
	tm := vocab.ToolMessage(r)
	r.Content = "y"
	if tm.Role != vocab.RoleTool || tm.Source != vocab.SourceTool || tm.Result.Content != "x" || tm.Text() != "x" {
		t.Errorf("ToolMessage = %+v", tm)
	}
	if u := vocab.UserText("q"); u.Role != vocab.RoleUser || u.Source != vocab.SourceInput {
		t.Errorf("UserText = %+v", u)
	}
}

func TestMessageJSON(t *testing.T) {
	m := vocab.Message{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
		{Kind: vocab.PartThinking, Text: "t"},
		{Kind: vocab.PartText, Text: "hi"},
		{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "read", Args: json.RawMessage(`{"a":1}`)}},
	}}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","role":"assistant","source":"model","parts":[{"kind":"thinking","text":"t"},{"kind":"text","text":"hi"},{"kind":"tool-call","call":{"id":"c1","name":"read","args":{"a":1}}}]}`
	if string(data) != want {
		t.Errorf("JSON:\n%s\nwant:\n%s", data, want)
	}
	var back vocab.Message
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestUsageAdd(t *testing.T) {
	a := vocab.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4}
	b := vocab.Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 30, CacheWriteTokens: 40}
	tests := []struct {
		x, y, want vocab.Usage
	}{
		{a, b, vocab.Usage{11, 22, 33, 44}},
		{b, a, vocab.Usage{11, 22, 33, 44}},
		{a, vocab.Usage{}, a},
		{vocab.Usage{}, vocab.Usage{}, vocab.Usage{}},
		{vocab.Usage{InputTokens: 5}, vocab.Usage{CacheWriteTokens: 7}, vocab.Usage{InputTokens: 5, CacheWriteTokens: 7}},
	}
	for _, tt := range tests {
		if got := tt.x.Add(tt.y); got != tt.want {
			t.Errorf("%+v.Add(%+v) = %+v, want %+v", tt.x, tt.y, got, tt.want)
		}
	}
	if a != (vocab.Usage{1, 2, 3, 4}) {
		t.Errorf("Add changed its receiver")
	}
}
