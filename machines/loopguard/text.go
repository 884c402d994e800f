package loopguard

import "strconv"

// keyForm is the shape of a warning key.
type keyForm uint8

const (
	formToolName       keyForm = iota // unknown-tool:<tool>:<name>
	formToolHashResult                // global|poll|generic:<tool>:<args>:<result|none>
	formToolHash                      // generic:<tool>:<args>
	formPair                          // pingpong:<lo>|<hi>
	formTool                          // argument-churn:<tool>
)

// keyParts are the components of a warning key; the string is built once
// and then served from the State's keyCache, so a loop that keeps hitting
// the same key allocates nothing.
type keyParts struct {
	form   keyForm
	prefix string
	tool   string
	name   string
	a, b   uint64
	hasB   bool
}

// build renders the key.
func (k *keyParts) build() string {
	buf := make([]byte, 0, len(k.prefix)+len(k.tool)+len(k.name)+40)
	buf = append(buf, k.prefix...)
	switch k.form {
	case formToolName:
		buf = append(append(append(buf, k.tool...), ':'), k.name...)
	case formToolHashResult:
		buf = appendHex(append(append(buf, k.tool...), ':'), k.a)
		buf = append(buf, ':')
		if k.hasB {
			buf = appendHex(buf, k.b)
		} else {
			buf = append(buf, "none"...)
		}
	case formToolHash:
		buf = appendHex(append(append(buf, k.tool...), ':'), k.a)
	case formPair:
		buf = appendHex(append(appendHex(buf, k.a), '|'), k.b)
	case formTool:
		buf = append(buf, k.tool...)
	}
	return string(buf)
}

// keyCacheSize is the number of recently built keys kept.
const keyCacheSize = 16

// keyCache holds recently built keys, replaced round-robin.
type keyCache struct {
	parts [keyCacheSize]keyParts
	keys  [keyCacheSize]string
	n     int // entries in use
	next  int // next slot to replace
}

// get returns the key for p, building it at most once while it stays in
// the cache.
func (c *keyCache) get(p keyParts) string {
	for i := range c.n {
		if c.parts[i] == p {
			return c.keys[i]
		}
	}
	s := p.build()
	c.parts[c.next], c.keys[c.next] = p, s
	c.next = (c.next + 1) % keyCacheSize
	c.n = min(c.n+1, keyCacheSize)
	return s
}

// message is the reason shown to the model: the seed's wording, with "Session
// execution blocked" adapted to what a critical verdict does here (the tool
// batch is blocked; the run goes on until a second critical).
func message(f finding, tool string) string {
	n := strconv.Itoa(f.count)
	switch f.detector {
	case UnknownToolRepeat:
		return "CRITICAL: attempted unavailable tool " + f.unknown + " " + n +
			" times. Stop retrying that missing tool and answer without it."
	case GlobalCircuitBreaker:
		return "CRITICAL: " + tool + " has repeated identical no-progress outcomes " + n +
			" times. The tool batch was blocked by the global circuit breaker to prevent runaway loops."
	case KnownPollNoProgress:
		if f.level == LevelCritical {
			return "CRITICAL: Called " + tool + " with identical arguments and no progress " + n +
				" times. This appears to be a stuck polling loop. The tool batch was blocked to prevent resource waste."
		}
		return "WARNING: You have called " + tool + " " + n +
			" times with identical arguments and no progress. Stop polling and either (1) increase wait time between checks, or (2) report the task as failed if the process is stuck."
	case PingPong:
		if f.level == LevelCritical {
			return "CRITICAL: You are alternating between repeated tool-call patterns (" + n +
				" consecutive calls) with no progress. This appears to be a stuck ping-pong loop. The tool batch was blocked to prevent resource waste."
		}
		return "WARNING: You are alternating between repeated tool-call patterns (" + n +
			" consecutive calls). This looks like a ping-pong loop; stop retrying and report the task as failed."
	case GenericRepeat:
		if f.level == LevelCritical {
			return "CRITICAL: Called " + tool + " with identical arguments and identical outcomes " + n +
				" times. The tool batch was blocked to prevent runaway loops."
		}
		return "WARNING: You have called " + tool + " " + n +
			" times with identical arguments. If this is not making progress, stop retrying and report the task as failed."
	case ArgumentChurn:
		return "WARNING: " + tool + " has cycled through " + strconv.Itoa(f.variants) +
			" repeated argument patterns with the same stable outcome " + n +
			" times. Continued churn is treated as stalled run activity, but this tool call remains allowed."
	}
	return ""
}

// Texts of the results of a blocked batch (seed §1.7
// completeToolLoopInterventionBatch). Every call of the batch gets an error
// result with code [CodeBlocked] and executionStarted false.
const (
	// TriggerAdvice follows the trigger call's reason the first time.
	TriggerAdvice = "Do not repeat this exact tool action. Reassess the task. You may answer the user, ask for clarification, or continue with a different tool or different arguments."
	// TriggerTerminal follows the trigger call's reason when the critical
	// is the run's second.
	TriggerTerminal = "Critical tool-loop recovery failed because another critical loop was detected. This run is stopping now."
	// SiblingBlocked is the text of the other calls of a blocked batch.
	SiblingBlocked = "This tool was not executed because another call in the batch triggered critical tool-loop recovery. Reassess the task before choosing the next action."
	// SiblingTerminal is the text of the other calls when the run stops.
	SiblingTerminal = "This tool was not executed because another call in the batch repeated a critical tool loop. This run is stopping now."
)

// TriggerText is the result text of the call that triggered the block:
// its reason, a blank line, then the advice (or the terminal notice).
func TriggerText(reason string, terminal bool) string {
	if terminal {
		return reason + "\n\n" + TriggerTerminal
	}
	return reason + "\n\n" + TriggerAdvice
}

// SiblingText is the result text of the other calls of a blocked batch.
func SiblingText(terminal bool) string {
	if terminal {
		return SiblingTerminal
	}
	return SiblingBlocked
}

// ResultText is the text of call i of a batch blocked by a: TriggerText for
// the trigger, SiblingText for the others.
func ResultText(a Admission, i int) string {
	if i == a.Blocked && i >= 0 && i < len(a.Verdicts) {
		return TriggerText(a.Verdicts[i].Message, a.Terminate)
	}
	return SiblingText(a.Terminate)
}
