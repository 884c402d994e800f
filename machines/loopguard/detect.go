package loopguard

// finding is the raw result of detection for one call.
type finding struct {
	level    Level
	detector Detector
	count    int
	variants int    // argument_churn
	unknown  string // unknown_tool_repeat: the unavailable tool
	key      keyParts
}

// detect is the seed's detectToolCallLoop: the first matching rule wins.
//
//  1. unknown-tool streak ≥ 10: critical unknown_tool_repeat
//  2. no-progress streak ≥ 30: critical global_circuit_breaker
//  3. poll and no-progress ≥ 20: critical known_poll_no_progress
//  4. poll and no-progress ≥ 10: warning known_poll_no_progress
//  5. ping-pong ≥ 20 with stable results on both sides: critical ping_pong
//  6. ping-pong ≥ 10: warning ping_pong
//  7. not a poll and no-progress ≥ 20: critical generic_repeat
//  8. argument churn ≥ 10: warning argument_churn (never critical)
//  9. not a poll and the same call ≥ 10 times in the history: warning
//     generic_repeat
//
// Each streak is computed only when its rule is reached.
func detect(h []Record, c *Call) finding {
	if n, name := unknownStreak(h, c.Tool); n >= UnknownToolThreshold {
		return finding{level: LevelCritical, detector: UnknownToolRepeat, count: n, unknown: name,
			key: keyParts{form: formToolName, prefix: "unknown-tool:", tool: c.Tool, name: name}}
	}
	np, latest, hasLatest := noProgressStreak(h, c)
	resultKey := func(prefix string) keyParts {
		return keyParts{form: formToolHashResult, prefix: prefix, tool: c.Tool, a: c.ArgsHash, b: latest, hasB: hasLatest}
	}
	switch {
	case np >= GlobalCircuitBreakerThreshold:
		return finding{level: LevelCritical, detector: GlobalCircuitBreaker, count: np, key: resultKey("global:")}
	case c.Poll && np >= CriticalThreshold:
		return finding{level: LevelCritical, detector: KnownPollNoProgress, count: np, key: resultKey("poll:")}
	case c.Poll && np >= WarningThreshold:
		return finding{level: LevelWarning, detector: KnownPollNoProgress, count: np, key: resultKey("poll:")}
	}
	if pp, paired, evidence := pingPongStreak(h, c); pp >= WarningThreshold {
		lo, hi := c.ArgsHash, paired
		if lo > hi {
			lo, hi = hi, lo
		}
		key := keyParts{form: formPair, prefix: "pingpong:", a: lo, b: hi}
		if pp >= CriticalThreshold && evidence {
			return finding{level: LevelCritical, detector: PingPong, count: pp, key: key}
		}
		return finding{level: LevelWarning, detector: PingPong, count: pp, key: key}
	}
	if !c.Poll && np >= CriticalThreshold {
		return finding{level: LevelCritical, detector: GenericRepeat, count: np, key: resultKey("generic:")}
	}
	if n, variants := churnStreak(h, c); n >= WarningThreshold {
		return finding{level: LevelWarning, detector: ArgumentChurn, count: n, variants: variants,
			key: keyParts{form: formTool, prefix: "argument-churn:", tool: c.Tool}}
	}
	if !c.Poll {
		if n := recentCount(h, c); n >= WarningThreshold {
			return finding{level: LevelWarning, detector: GenericRepeat, count: n,
				key: keyParts{form: formToolHash, prefix: "generic:", tool: c.Tool, a: c.ArgsHash}}
		}
	}
	return finding{}
}

// unknownStreak counts, newest first, the consecutive records of tool that
// called the same unknown tool; another tool or a known outcome stops it.
// Departure from the seed: a veto record of the same tool (a block, or a
// sibling in the projection) is held pending and counted once an older
// unknown-tool record anchors it, as in the no-progress streak; in the seed
// it stopped the streak, so a block reset it and a batch of two unknown
// calls never saw each other.
func unknownStreak(h []Record, tool string) (int, string) {
	count, pending := 0, 0
	name := ""
	for i := len(h) - 1; i >= 0; i-- {
		r := &h[i]
		if r.Tool != tool {
			break
		}
		if r.Veto {
			pending++
			continue
		}
		if r.Unknown == "" || (name != "" && r.Unknown != name) {
			break
		}
		name = r.Unknown
		count += pending + 1
		pending = 0
	}
	return count, name
}

// noProgressStreak is the seed's getNoProgressStreak: newest first over the
// records of c's action (others skipped), veto records are pending until an
// older record with a result anchors them; the first result fixes the hash,
// each further equal result adds pending + 1, a different one stops. With
// no result at all the count is the number of vetoes.
func noProgressStreak(h []Record, c *Call) (count int, latest uint64, has bool) {
	pending := 0
	for i := len(h) - 1; i >= 0; i-- {
		r := &h[i]
		if !r.same(c) {
			continue
		}
		if r.Veto {
			pending++
			continue
		}
		if !r.HasResult {
			continue
		}
		if !has {
			has, latest, count, pending = true, uint64(r.Result), pending+1, 0
			continue
		}
		if uint64(r.Result) != latest {
			break
		}
		count += pending + 1
		pending = 0
	}
	if !has {
		return pending, 0, false
	}
	return count, latest, true
}

// sameSig reports whether a and b are the same action (tool and args).
func sameSig(a, b *Record) bool { return a.Args == b.Args && a.Tool == b.Tool }

// pingPongStreak is the seed's getPingPongStreak: last is the newest record,
// other the newest earlier record of another action; the alternating tail
// (last, other, last, …) counted from the newest must be at least 2 and c
// must be other's action. evidence: every tail record has a result and each
// side always had the same one. The count includes c.
func pingPongStreak(h []Record, c *Call) (count int, paired uint64, evidence bool) {
	n := len(h)
	if n < 2 {
		return 0, 0, false
	}
	last := &h[n-1]
	var other *Record
	for i := n - 2; i >= 0; i-- {
		if !sameSig(&h[i], last) {
			other = &h[i]
			break
		}
	}
	if other == nil || !other.same(c) {
		return 0, 0, false
	}
	tail := 0
	for i := n - 1; i >= 0; i-- {
		want := last
		if tail%2 == 1 {
			want = other
		}
		if !sameSig(&h[i], want) {
			break
		}
		tail++
	}
	if tail < 2 {
		return 0, 0, false
	}
	evidence = true
	var resA, resB Hash
	var gotA, gotB bool
	for i := n - tail; i < n && evidence; i++ {
		r := &h[i]
		switch {
		case !r.HasResult:
			evidence = false
		case sameSig(r, last):
			if gotA && r.Result != resA {
				evidence = false
			}
			resA, gotA = r.Result, true
		default:
			if gotB && r.Result != resB {
				evidence = false
			}
			resB, gotB = r.Result, true
		}
	}
	return tail + 1, uint64(last.Args), evidence && gotA && gotB
}

// variant is one argument variant of a churn scan.
type variant struct {
	args, result Hash
	n            int
}

// churnStreak is the seed's getArgumentChurnNoProgressStreak: newest first
// over the contiguous run of c.Tool's records (another tool stops it);
// records without a result are skipped, a result without NoProgress stops
// it, and so does a variant whose result changes. Churn holds when more than
// one variant has MinStableCallsPerVariant calls, every counted call belongs
// to such a variant, they all share one result and c continues one of them.
// The count is the number of calls counted.
func churnStreak(h []Record, c *Call) (count, variants int) {
	// At most HistorySize counted calls and every variant needs
	// MinStableCallsPerVariant of them: a scan that finds more variants
	// than that cannot be churn, and stops.
	var vs [HistorySize / MinStableCallsPerVariant]variant
	nv := 0
scan:
	for i := len(h) - 1; i >= 0; i-- {
		r := &h[i]
		if r.Tool != c.Tool {
			break
		}
		if !r.HasResult {
			continue
		}
		if !r.NoProgress {
			break
		}
		for k := range vs[:nv] {
			if vs[k].args == r.Args {
				if vs[k].result != r.Result {
					break scan
				}
				vs[k].n++
				continue scan
			}
		}
		if nv == len(vs) {
			return 0, 0
		}
		vs[nv] = variant{args: r.Args, result: r.Result, n: 1}
		nv++
	}
	total, stable, stableCalls, current := 0, 0, 0, 0
	var shared Hash
	sharedOK := true
	for _, v := range vs[:nv] {
		total += v.n
		if uint64(v.args) == c.ArgsHash {
			current = v.n
		}
		if v.n < MinStableCallsPerVariant {
			continue
		}
		if stable > 0 && v.result != shared {
			sharedOK = false
		}
		shared = v.result
		stable++
		stableCalls += v.n
	}
	if stable > 1 && stableCalls == total && sharedOK && current >= MinStableCallsPerVariant {
		return total, stable
	}
	return 0, 0
}

// recentCount counts the records of c's action, whatever their outcome.
func recentCount(h []Record, c *Call) int {
	n := 0
	for i := range h {
		if h[i].same(c) {
			n++
		}
	}
	return n
}
