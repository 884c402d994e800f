package chart

import (
	"fmt"
	"time"
)

// StartTimer asks the adapter to deliver a timer event named Name carrying
// Seq after Delay (measured on the adapter's clock). A newer StartTimer with
// the same name supersedes the older one.
type StartTimer struct {
	Name  string
	Seq   uint64
	Delay time.Duration
}

// EffectName implements Effect.
func (StartTimer) EffectName() string { return "start-timer" }

// String renders StartTimer for tables and logs.
func (e StartTimer) String() string {
	return fmt.Sprintf("start-timer %s#%d after %s", e.Name, e.Seq, e.Delay)
}

// CancelTimer asks the adapter to drop the pending timer Name#Seq; a timer
// event that still arrives is rejected by the machine's guards.
type CancelTimer struct {
	Name string
	Seq  uint64
}

// EffectName implements Effect.
func (CancelTimer) EffectName() string { return "cancel-timer" }

// String renders CancelTimer for tables and logs.
func (e CancelTimer) String() string { return fmt.Sprintf("cancel-timer %s#%d", e.Name, e.Seq) }

// Timer is a pending timer as kept in a machine context (and so in its
// snapshot): the adapter re-arms it after a restore.
type Timer struct {
	Name  string        `json:"name"`
	Seq   uint64        `json:"seq"`
	Delay time.Duration `json:"delay"`
}

// Pending reports whether a timer is armed.
func (t Timer) Pending() bool { return t.Seq != 0 }

// Arm records a new timer named name, using *seq as the counter, and emits
// the StartTimer effect.
func (t *Timer) Arm(seq *uint64, name string, d time.Duration, out *Out) {
	*seq++
	*t = Timer{Name: name, Seq: *seq, Delay: d}
	out.Emit(StartTimer{Name: name, Seq: *seq, Delay: d})
}

// Disarm cancels the timer if one is armed.
func (t *Timer) Disarm(out *Out) {
	if t.Seq != 0 {
		out.Emit(CancelTimer{Name: t.Name, Seq: t.Seq})
		*t = Timer{}
	}
}

// Matches reports whether a timer event (name, seq) is the armed timer.
func (t Timer) Matches(name string, seq uint64) bool {
	return t.Seq != 0 && t.Seq == seq && t.Name == name
}
