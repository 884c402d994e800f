// Package loopguard detects an agent stuck in a tool-call loop: the six
// detectors of seed 000 (OpenClaw's tool-loop-detection, six-detector
// version), their warning buckets and the batch admission that turns a
// critical verdict into a blocked batch and a second one into the end of the
// run.
//
// The package is pure and deterministic: no clock, no randomness, no
// goroutines, no map iterated in an order that matters. The session core
// embeds a [State], snapshots it as JSON and calls it synchronously:
//
//	a := st.Admit(calls)            // before a batch runs
//	if a.Blocked >= 0 {
//		st.Block(calls, a)          // nothing runs; a.Terminate ends the run
//	} else {
//		st.Launched(c)              // as each call starts
//		st.Finished(c, OutcomeOf(res, volatile))
//	}
//	st.NewRun()                     // at the start of each prompt run
//
// Thresholds, algorithms, keys and messages follow seed-semantics §1.6–1.7;
// the package documentation of each function says where it departs.
package loopguard

import (
	"encoding/json"
	"errors"
	"slices"
)

// Thresholds of seed 000 (§1.6); fixed, as in the seed.
const (
	// HistorySize is the number of records kept per run.
	HistorySize = 30
	// UnknownToolThreshold: this many consecutive calls of the same
	// unknown tool are critical.
	UnknownToolThreshold = 10
	// CriticalThreshold: no-progress repeats (generic and poll) and
	// ping-pong with stable results become critical here.
	CriticalThreshold = 20
	// GlobalCircuitBreakerThreshold: identical no-progress outcomes of any
	// tool are critical here, before any other rule but unknown tools.
	GlobalCircuitBreakerThreshold = 30
	// WarningThreshold: repeats, polls, ping-pong and churn warn here.
	WarningThreshold = 10
	// MinStableCallsPerVariant: an argument variant takes part in churn
	// once it failed the same way this many times.
	MinStableCallsPerVariant = 3
	// WarningBucketSize: a warning key is emitted once per bucket of this
	// many counts.
	WarningBucketSize = 10
	// MaxWarningKeys: warning buckets kept; the oldest key goes first.
	MaxWarningKeys = 256
)

// Detector names the rule that produced a verdict.
type Detector string

// The six detectors.
const (
	UnknownToolRepeat    Detector = "unknown_tool_repeat"
	GlobalCircuitBreaker Detector = "global_circuit_breaker"
	KnownPollNoProgress  Detector = "known_poll_no_progress"
	PingPong             Detector = "ping_pong"
	GenericRepeat        Detector = "generic_repeat"
	ArgumentChurn        Detector = "argument_churn"
)

// Level is a verdict's severity: "" (none), warning or critical.
type Level string

// Levels.
const (
	LevelNone     Level = ""
	LevelWarning  Level = "warning"
	LevelCritical Level = "critical"
)

var errBadHash = errors.New("loopguard: a hash must be 1 to 16 hex digits")

// Call is one tool call as admission sees it.
type Call struct {
	ID       string
	Tool     string
	ArgsHash uint64 // HashArgs(tool, args), computed once by the caller
	Poll     bool   // the tool is a poll (vocab.ToolSpec.Poll)
}

// Record is one history entry. A record without HasResult and without Veto
// is a call that started and has not finished.
type Record struct {
	ID   string `json:"id,omitempty"`
	Tool string `json:"t"`
	Args Hash   `json:"a"`
	// Result is the outcome's digest, meaningful only when HasResult.
	Result     Hash   `json:"r,omitempty"`
	HasResult  bool   `json:"h,omitempty"`
	NoProgress bool   `json:"np,omitempty"`
	Veto       bool   `json:"v,omitempty"`
	Unknown    string `json:"u,omitempty"`
}

// done reports whether the record carries an outcome.
func (r *Record) done() bool { return r.HasResult || r.Veto }

// same reports whether r is a record of call c's action (tool and args).
func (r *Record) same(c *Call) bool { return uint64(r.Args) == c.ArgsHash && r.Tool == c.Tool }

// Bucket is the last warning bucket emitted for one warning key.
type Bucket struct {
	Key    string `json:"k"`
	Bucket int    `json:"b"`
}

// State is the detector state of one session for its current run. It is
// plain data: the exported fields round-trip through encoding/json exactly,
// and the zero value is ready. The unexported fields are scratch space
// (reused buffers and a lookup index), rebuilt on demand; copy a State with
// [State.Clone], not by assignment, when both copies stay in use.
type State struct {
	// History holds the run's last HistorySize records, oldest first.
	History []Record `json:"history,omitempty"`
	// Warnings holds the warning buckets in the order their keys were
	// first emitted (the oldest is dropped past MaxWarningKeys).
	Warnings []Bucket `json:"warnings,omitempty"`
	// CriticalSeen is set by the run's first blocked batch; a second
	// critical verdict terminates the run.
	CriticalSeen bool `json:"criticalSeen,omitempty"`

	proj     []Record       // the projected history of Admit
	win      []Record       // the full history's storage (see push)
	verdicts []Verdict      // Admission.Verdicts
	index    map[string]int // Warnings key → position
	indexed  int            // len(Warnings) when index was last in step
	keys     *keyCache      // recently built warning keys (pure: safe to share)
}

// IsZero reports whether s holds nothing (no history, no warning buckets,
// no critical seen), whatever its scratch space: encoding/json's omitzero
// asks it, so a state emptied by NewRun encodes as one never used.
func (s *State) IsZero() bool {
	return len(s.History) == 0 && len(s.Warnings) == 0 && !s.CriticalSeen
}

// Clone returns a deep copy of the exported state (scratch not shared).
func (s *State) Clone() State {
	return State{
		History:      slices.Clip(slices.Clone(s.History)), // no room to share: push copies it before growing it
		Warnings:     slices.Clone(s.Warnings),
		CriticalSeen: s.CriticalSeen,
	}
}

// UnmarshalJSON decodes a snapshot into s, replacing all of it (fields
// absent from the snapshot are empty, as [json.Marshal] left them out) and
// dropping the scratch space, whose index would no longer match.
func (s *State) UnmarshalJSON(b []byte) error {
	type plain State // no methods: the default decoding
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = State{History: slices.Clip(p.History), Warnings: p.Warnings, CriticalSeen: p.CriticalSeen}
	return nil
}

// NewRun starts a new prompt run: history, warning buckets and the
// critical flag reset (the seed scopes all three by run id).
func (s *State) NewRun() {
	clear(s.History)
	s.History = s.History[:0]
	if s.win != nil {
		s.History = s.win[:0] // the window starts over at win's front
	}
	s.Warnings = s.Warnings[:0]
	s.CriticalSeen = false
	s.index = nil
}

// Verdict is what detection says of one call.
type Verdict struct {
	Level    Level    `json:"level,omitempty"`
	Detector Detector `json:"detector,omitempty"`
	Count    int      `json:"count,omitempty"`
	// Key is the warning key (seed §1.6), e.g. "generic:<tool>:<hash>"
	// with 16-hex-digit hashes.
	Key string `json:"key,omitempty"`
	// Message is the reason shown to the model. It is set for a critical
	// verdict and for a warning that is emitted; a warning inside an
	// already-emitted bucket is not shown, and costs no message.
	Message string `json:"message,omitempty"`
	// Emit: a critical is always emitted; a warning only when its count
	// reaches a new bucket of WarningBucketSize for its key (§1.7).
	Emit bool `json:"emit,omitempty"`
	// Variants is the number of argument variants of an argument_churn
	// verdict.
	Variants int `json:"variants,omitempty"`
}

// Admission is the verdict on a whole batch (seed §1.7 admitToolCallBatch).
type Admission struct {
	// Verdicts holds one verdict per call checked, up to and including the
	// critical one. It is scratch space of the State: valid until the next
	// Admit; copy it to keep it.
	Verdicts []Verdict
	// Blocked is the index of the call whose verdict is critical; -1 when
	// the batch may run.
	Blocked int
	// Terminate: the critical is the run's second; the run must stop.
	Terminate bool
}

// Admit checks a batch before it runs. Calls are checked in order against a
// projected copy of the history: after each call, a synthetic veto record
// for it is appended to the projection, so a later sibling sees the earlier
// call as a no-progress repeat. The projection may grow past HistorySize
// (the real pre-batch history is never evicted by siblings). Checking stops
// at the first critical verdict. Warning buckets are updated for emitted
// warnings even when a later sibling blocks the batch (as in the seed). The
// history itself is not changed: call [State.Block] after a critical
// admission, [State.Launched] and [State.Finished] otherwise.
func (s *State) Admit(calls []Call) Admission {
	a := Admission{Blocked: -1}
	if len(calls) == 0 {
		return a
	}
	s.verdicts = s.verdicts[:0]
	h := s.History
	if len(calls) > 1 {
		need := len(s.History) + len(calls)
		if cap(s.proj) < need {
			s.proj = make([]Record, 0, max(need, HistorySize+8))
		}
		s.proj = append(s.proj[:0], s.History...)
		h = s.proj
	}
	for i := range calls {
		c := &calls[i]
		v := s.judge(h, c)
		s.verdicts = append(s.verdicts, v)
		if v.Level == LevelCritical {
			a.Blocked = i
			a.Terminate = s.CriticalSeen
			break
		}
		if len(calls) > 1 {
			s.proj = append(s.proj, Record{ID: c.ID, Tool: c.Tool, Args: Hash(c.ArgsHash), Veto: true})
			h = s.proj
		}
	}
	if len(calls) > 1 {
		clear(s.proj) // drop string references
		s.proj = s.proj[:0]
	}
	a.Verdicts = s.verdicts
	return a
}

// Block records a blocked batch: a veto record in the real history for
// every call of the batch with the trigger's action (same tool and
// arguments), so the block extends rather than resets the streak, and sets
// the run's critical flag. Other calls of the batch leave no trace: they
// remain valid recovery choices. Block does nothing when a.Blocked < 0.
// The blocked results themselves ([CodeBlocked]) are not to be reported
// through Finished: Block has recorded what the seed records.
func (s *State) Block(calls []Call, a Admission) {
	if a.Blocked < 0 || a.Blocked >= len(calls) {
		return
	}
	trigger := calls[a.Blocked]
	for i := range calls {
		if c := &calls[i]; c.ArgsHash == trigger.ArgsHash && c.Tool == trigger.Tool {
			s.push(Record{ID: c.ID, Tool: c.Tool, Args: Hash(c.ArgsHash), Veto: true})
		}
	}
	s.CriticalSeen = true
}

// Launched records that call c starts (the seed's recordToolCall): a
// record without outcome.
func (s *State) Launched(c Call) {
	s.push(Record{ID: c.ID, Tool: c.Tool, Args: Hash(c.ArgsHash)})
}

// Finished records c's outcome (recordToolCallOutcome): the newest record
// of the same call id (when c.ID is set), tool and arguments that has no
// outcome yet gets it; without one, a new record is appended. An outcome
// with neither result nor veto records nothing.
func (s *State) Finished(c Call, o Outcome) {
	if !o.HasResult && !o.Veto {
		return
	}
	fill := func(r *Record) {
		r.HasResult = o.HasResult
		r.Veto = o.Veto && !o.HasResult
		if o.HasResult {
			r.Result = Hash(o.ResultHash)
			r.NoProgress = o.NoProgress
			r.Unknown = o.UnknownTool
		}
	}
	for i := len(s.History) - 1; i >= 0; i-- {
		r := &s.History[i]
		if r.done() || !r.same(&c) || (c.ID != "" && r.ID != c.ID) {
			continue
		}
		fill(r)
		return
	}
	r := Record{ID: c.ID, Tool: c.Tool, Args: Hash(c.ArgsHash)}
	fill(&r)
	s.push(r)
}

// push appends r to the history, dropping the oldest record past
// HistorySize. Once the history is full it is a window sliding along win
// (twice HistorySize records): dropping the oldest record moves the
// window's start, and the window is copied back to win's front only when
// it reaches win's end, once every HistorySize pushes rather than on each.
func (s *State) push(r Record) {
	if len(s.History) >= HistorySize {
		n := len(s.History) - HistorySize + 1
		clear(s.History[:n]) // drop string references
		s.History = s.History[n:]
		if len(s.History) == cap(s.History) {
			if s.win == nil {
				s.win = make([]Record, 2*HistorySize)
			}
			m := copy(s.win, s.History) // may overlap: copy moves
			clear(s.win[m:])
			s.History = s.win[:m]
		}
	}
	if len(s.History) == cap(s.History) && cap(s.History) < HistorySize {
		// Grown in steps up to the window (a session that calls a
		// tool or two does not hold room for thirty records).
		h := make([]Record, len(s.History), min(HistorySize, max(4, 2*cap(s.History))))
		copy(h, s.History)
		s.History = h
	}
	s.History = append(s.History, r)
}

// judge runs detection for c on h and, for a warning, the bucket rule.
func (s *State) judge(h []Record, c *Call) Verdict {
	f := detect(h, c)
	if f.level == LevelNone {
		return Verdict{}
	}
	v := Verdict{Level: f.level, Detector: f.detector, Count: f.count, Variants: f.variants}
	if s.keys == nil {
		s.keys = new(keyCache)
	}
	v.Key = s.keys.get(f.key)
	if f.level == LevelCritical {
		v.Emit = true
	} else {
		v.Emit = s.shouldEmit(v.Key, f.count)
	}
	if v.Emit {
		v.Message = message(f, c.Tool)
	}
	return v
}

// shouldEmit is the seed's shouldEmitLoopWarning: the bucket ⌊count/10⌋
// must exceed the last bucket emitted for key (initially 0); at most
// MaxWarningKeys keys are kept, the first-inserted dropped first.
func (s *State) shouldEmit(key string, count int) bool {
	bucket := count / WarningBucketSize
	if s.index == nil || s.indexed != len(s.Warnings) {
		s.reindex()
	}
	pos, ok := s.index[key]
	if ok && (pos >= len(s.Warnings) || s.Warnings[pos].Key != key) {
		s.reindex()
		pos, ok = s.index[key]
	}
	last := 0
	if ok {
		last = s.Warnings[pos].Bucket
	}
	if bucket <= last {
		return false
	}
	if ok {
		s.Warnings[pos].Bucket = bucket
		return true
	}
	s.index[key] = len(s.Warnings)
	s.Warnings = append(s.Warnings, Bucket{Key: key, Bucket: bucket})
	s.indexed = len(s.Warnings)
	if len(s.Warnings) > MaxWarningKeys {
		drop := len(s.Warnings) - MaxWarningKeys
		copy(s.Warnings, s.Warnings[drop:])
		clear(s.Warnings[len(s.Warnings)-drop:])
		s.Warnings = s.Warnings[:MaxWarningKeys]
		s.reindex()
	}
	return true
}

// reindex rebuilds the key index from Warnings (a fresh map: a State copied
// by assignment must not share it).
func (s *State) reindex() {
	s.index = make(map[string]int, len(s.Warnings)+1)
	for i, b := range s.Warnings {
		s.index[b.Key] = i // a duplicated key (a hand-made snapshot): the last wins
	}
	s.indexed = len(s.Warnings)
}
