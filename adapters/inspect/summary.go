package inspect

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Row is one event of the timeline (api/sessions/{id}/events, and each
// message of the stream). Text fields hold model and tool text as data:
// the page only ever sets them as text.
type Row struct {
	// Seq, At, Kind, Turn and Step are the event's envelope.
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Turn int       `json:"turn,omitempty"`
	Step int       `json:"step,omitempty"`
	// Summary is one line describing the event.
	Summary string `json:"summary"`
	// Machine is set for transitions, Call for events about one tool
	// call (transitions of its tool machine included).
	Machine string `json:"machine,omitempty"`
	Call    string `json:"call,omitempty"`
	// Error marks failures: error results, failed requests, errors.
	Error bool `json:"error,omitempty"`
}

// summaryRunes bounds a summary's length.
const summaryRunes = 240

// clip makes s one line of at most n runes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// rowOf describes the stored event r.
func rowOf(r store.Record) Row {
	row := Row{Seq: r.Seq, At: r.At, Kind: string(r.Kind), Turn: r.Turn, Step: r.Step}
	e, err := r.Event()
	if err != nil && vocab.KnownKind(r.Kind) {
		row.Summary = "undecodable event: " + clip(err.Error(), summaryRunes)
		row.Error = true
		return row
	}
	row.Summary = clip(summarize(&row, e), summaryRunes)
	return row
}

// summarize returns the one-line description of e, setting row's
// Machine, Call and Error.
func summarize(row *Row, e vocab.Event) string {
	switch p := e.Payload.(type) {
	case vocab.TransitionPayload:
		row.Machine = p.Machine
		who := p.Machine
		if p.Instance != "" {
			who += " " + p.Instance
			row.Call = p.Instance
		}
		how := p.Trigger + guardText(p.Guard)
		if p.Internal {
			return fmt.Sprintf("%s %s (%s, internal)", who, p.From, how)
		}
		return fmt.Sprintf("%s %s → %s (%s)", who, p.From, p.To, how)
	case vocab.ToolPayload:
		row.Call = p.Call.ID
		switch e.Kind {
		case vocab.EventToolCall:
			return fmt.Sprintf("call %s %s(%s)", p.Call.ID, p.Call.Name, p.Call.Args)
		case vocab.EventToolExecutionStart:
			return fmt.Sprintf("run %s %s", p.Call.ID, p.Call.Name)
		case vocab.EventToolExecutionUpdate:
			return fmt.Sprintf("progress %s: %s", p.Call.ID, p.Update)
		}
		if p.Result == nil {
			return fmt.Sprintf("ran %s %s", p.Call.ID, p.Call.Name)
		}
		row.Error = p.Result.IsError
		what := "result"
		if p.Result.IsError {
			what = "error result"
		}
		if e.Kind == vocab.EventToolExecutionEnd {
			return fmt.Sprintf("ran %s %s: %s", p.Call.ID, p.Call.Name, p.Result.Content)
		}
		return fmt.Sprintf("%s %s: %s", what, p.Call.ID, p.Result.Content)
	case vocab.ApprovalPayload:
		row.Call = p.Call.ID
		switch p.State {
		case vocab.ApprovalRequested:
			return fmt.Sprintf("approval asked for %s: %s", p.Call.ID, p.Question)
		case vocab.ApprovalAnswered:
			s := fmt.Sprintf("approval given for %s: %s", p.Call.ID, p.Decision)
			if p.Reason != "" {
				s += " (" + p.Reason + ")"
			}
			return s
		}
		return fmt.Sprintf("approval of %s %s", p.Call.ID, p.State)
	case vocab.UsagePayload:
		u := p.Usage
		s := fmt.Sprintf("usage: %d in", u.InputTokens)
		if u.CacheReadTokens > 0 {
			s += fmt.Sprintf(" (%d from cache)", u.CacheReadTokens)
		}
		s += fmt.Sprintf(", %d out", u.OutputTokens)
		if u.CacheWriteTokens > 0 {
			s += fmt.Sprintf(", %d cached", u.CacheWriteTokens)
		}
		return s
	case vocab.RetryPayload:
		row.Error = true
		return fmt.Sprintf("retry: attempt %d failed (%s: %s); attempt %d/%d in %v",
			p.FailedAttempt, p.Code, p.Message, p.NextAttempt, p.MaxAttempts, p.Delay)
	case vocab.ErrorPayload:
		row.Error = true
		what := "error"
		if e.Kind == vocab.EventRecovering {
			what = "recovering"
		}
		return fmt.Sprintf("%s: %s: %s", what, p.Code, p.Message)
	case vocab.TurnEndPayload:
		row.Error = p.Reason.Kind == vocab.EndError
		return fmt.Sprintf("turn end: %s after %d steps", p.Reason, p.Steps)
	case vocab.StepEndPayload:
		return fmt.Sprintf("step end: %s", p.Finish)
	case vocab.MessagePayload:
		return messageSummary(e.Kind, p.Message)
	case vocab.DeltaPayload:
		return fmt.Sprintf("%s: %s", p.Part.Kind, p.Part.Text)
	case vocab.PromptPayload:
		if p.Detail != "" {
			return fmt.Sprintf("prompt %s: %s", p.State, p.Detail)
		}
		return fmt.Sprintf("prompt %s", p.State)
	case vocab.StatusPayload:
		return "status: " + p.Status
	case vocab.LoopPayload:
		row.Call = p.CallID
		what := "loop warning"
		if e.Kind == vocab.EventLoopIntervention {
			what, row.Error = "loop intervention", true
		}
		if p.Detector != "" {
			return fmt.Sprintf("%s: %s ×%d on %s: %s", what, p.Detector, p.Count, p.Tool, p.Message)
		}
		return fmt.Sprintf("%s: %s", what, p.Message)
	case vocab.InboxPayload:
		return fmt.Sprintf("inbox %s %s: %d message(s)", p.Target, p.Op, max(len(p.Messages), p.Removed))
	case vocab.HeaderPayload:
		return fmt.Sprintf("request header (%s): model %s, %d tools", p.Reason, p.Model, len(p.Tools))
	case vocab.SnapshotPayload:
		return fmt.Sprintf("core snapshot at event %d", p.Seq)
	case vocab.HistoryPayload:
		return fmt.Sprintf("history replaced by %s: %d messages", p.By, len(p.Messages))
	case vocab.HookPayload:
		row.Error = true
		return fmt.Sprintf("hook %s failed: %s: %s", p.Hook, p.Code, p.Message)
	case vocab.StuckPayload:
		row.Error = true
		return fmt.Sprintf("work %d stuck: %s", p.Work, p.What)
	case vocab.StalePayload:
		return fmt.Sprintf("stale input %s (work %d): %s", p.Input, p.Work, p.Reason)
	case vocab.Input:
		return inputSummary(p)
	}
	switch e.Kind {
	case vocab.EventTurnStart:
		return fmt.Sprintf("turn %d starts", e.Turn)
	case vocab.EventStepStart:
		return fmt.Sprintf("step %d starts", e.Step)
	}
	return string(e.Kind)
}

// messageSummary describes a message event.
func messageSummary(kind vocab.EventKind, m vocab.Message) string {
	who := string(m.Role)
	if kind == vocab.EventMessageStart {
		return who + " message starts"
	}
	s := who + ": " + m.Text()
	if n := len(m.ToolCalls()); n > 0 {
		s += fmt.Sprintf(" [%d tool call(s)]", n)
	}
	return s
}

// inputSummary describes an input event.
func inputSummary(in vocab.Input) string {
	s := "input " + string(in.Kind)
	switch {
	case in.Message != nil:
		s += ": " + in.Message.Text()
	case in.Err != nil:
		s += fmt.Sprintf(" (work %d): %s", in.Work, in.Err.Error())
	case in.Result != nil:
		s += fmt.Sprintf(" (work %d): %s", in.Work, in.Result.Content)
	case in.Approval != nil:
		s += fmt.Sprintf(": %s %s", in.Approval.CallID, in.Approval.Decision)
	case in.Cause != nil:
		s += ": " + in.Cause.String()
	case in.Work != 0:
		s += fmt.Sprintf(" (work %d)", in.Work)
	}
	return s
}
