package session

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/loopguard"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// SnapshotVersion is the format version of Snapshot.
const SnapshotVersion = 2

// snapshot is the whole core as data.
type snapshot struct {
	Version     int                       `json:"version"`
	Config      Config                    `json:"config"`
	Agent       chart.Snapshot[agent.Ctx] `json:"agent"`
	Turn        *chart.Snapshot[turn.Ctx] `json:"turn,omitempty"`
	TurnNo      int                       `json:"turnNo"`
	Step        int                       `json:"step"`
	Prompt      vocab.ID                  `json:"prompt,omitempty"`
	StepOpen    bool                      `json:"stepOpen,omitempty"`
	InTurn      bool                      `json:"inTurn,omitempty"`
	Resume      bool                      `json:"resume,omitempty"`
	Concluded   bool                      `json:"concluded,omitempty"`
	LastFinish  vocab.FinishReason        `json:"lastFinish,omitempty"`
	StopReason  string                    `json:"stopReason,omitempty"`
	Claim       []vocab.Message           `json:"claim,omitempty"`
	History     []vocab.Message           `json:"history,omitempty"`
	Model       uint64                    `json:"model,omitempty"`
	Reply       *vocab.Message            `json:"reply,omitempty"`
	ReplyOpen   bool                      `json:"replyOpen,omitempty"`
	Batch       []callSnapshot            `json:"batch,omitempty"`
	Background  []callSnapshot            `json:"background,omitempty"`
	RunDeadline time.Time                 `json:"runDeadline,omitzero"`
	Guard       loopguard.State           `json:"guard,omitzero"`
	Work        []pendingSnapshot         `json:"work,omitempty"`
	WorkSeq     uint64                    `json:"workSeq"`
	Seq         uint64                    `json:"seq"`
	Now         time.Time                 `json:"now"`
	Status      agent.PublicStatus        `json:"status"`
	Prompts     []vocab.ID                `json:"prompts,omitempty"`
	Yielded     vocab.ID                  `json:"yielded,omitempty"`
	Slot        uint64                    `json:"slot,omitempty"`
	SlotHeld    bool                      `json:"slotHeld,omitempty"`
	Used        []vocab.ID                `json:"used,omitempty"`
	ReplyKind   vocab.PartKind            `json:"replyKind,omitempty"`
	ReplyBuf    string                    `json:"replyBuf,omitempty"`
	ReplyUsage  *vocab.Usage              `json:"replyUsage,omitempty"`
	Closed      bool                      `json:"closed,omitempty"`
	Opened      bool                      `json:"opened,omitempty"`
	Header      string                    `json:"header,omitempty"`
	Sources     []uint64                  `json:"replySources,omitempty"`
}

type callSnapshot struct {
	Call  vocab.ToolCall            `json:"call"`
	Inst  *chart.Snapshot[tool.Ctx] `json:"inst,omitempty"`
	Work  uint64                    `json:"work,omitempty"`
	Skip  bool                      `json:"skip,omitempty"`
	Abort *vocab.CancelCause        `json:"abort,omitempty"`
	// Access, Ready, Launched and Hook are the scheduler's view of it.
	Access   vocab.Accesses `json:"access,omitzero"`
	Ready    bool           `json:"ready,omitempty"`
	Launched bool           `json:"launched,omitempty"`
	Hook     uint64         `json:"hook,omitempty"`
	// Loop, Blocked and Note are loop detection's view of it.
	Loop    loopguard.Call    `json:"loop,omitzero"`
	Blocked *vocab.ToolResult `json:"blocked,omitempty"`
	Note    string            `json:"note,omitempty"`
}

type pendingSnapshot struct {
	ID       uint64          `json:"id"`
	Kind     WorkKind        `json:"kind"`
	Turn     int             `json:"turn,omitempty"`
	Claimed  []vocab.Message `json:"claimed,omitempty"`
	Failure  *vocab.Input    `json:"failure,omitempty"`
	Machine  string          `json:"machine,omitempty"`
	Instance string          `json:"instance,omitempty"`
	Name     string          `json:"name,omitempty"`
	TimerSeq uint64          `json:"timerSeq,omitempty"`
	Work     Work            `json:"work"`
	Waiting  bool            `json:"waiting,omitempty"`
}

// Snapshot captures the whole core as versioned JSON: the machines'
// instances, history, inbox, claims, the tool batch, outstanding work
// (in-flight requests and calls, armed timers, pending hooks) and prompt
// bookkeeping. It is taken between Advance and the next Step only: with a
// Ready outstanding it fails.
func (c *Core) Snapshot() ([]byte, error) {
	if c.m == nil {
		return nil, vocab.Errorf(vocab.CodeInternal, "session: Snapshot without machines (see Use)")
	}
	if len(c.m.rd.Events)+len(c.m.rd.Work)+len(c.m.rd.Results) > 0 {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: snapshot with a Ready not yet advanced")
	}
	s := snapshot{Version: SnapshotVersion, Config: c.cfg, Agent: c.m.agent.Snapshot(c.agent), TurnNo: c.turnNo, Step: c.step,
		Prompt: c.prompt, StepOpen: c.stepOpen, InTurn: c.inTurn, Resume: c.resume, Concluded: c.concluded, LastFinish: c.lastFinish,
		StopReason: c.stopReason, Claim: c.claim, History: c.history, Model: c.model, WorkSeq: c.workSeq,
		Seq: c.seq, Now: c.now, Status: c.status, Prompts: c.prompts, Yielded: c.yielded, Slot: c.slot, SlotHeld: c.slotHeld, Closed: c.closed, Used: c.usedList,
		Opened: c.opened, Header: c.header, Sources: c.reply.sources, RunDeadline: c.runDeadline, Guard: c.guard.Clone()}
	if c.turn != nil {
		t := c.m.turn.Snapshot(c.turn)
		s.Turn = &t
	}
	if c.reply.open || len(c.reply.msg.Parts) > 0 || c.reply.buf.Len() > 0 {
		// Read the assembler as it stands, without flushing its buffer:
		// taking a snapshot must not change the core.
		m := c.reply.msg
		m.Parts = slices.Clone(m.Parts)
		s.Reply, s.ReplyOpen = &m, c.reply.open
		s.ReplyKind, s.ReplyBuf = c.reply.kind, c.reply.buf.String()
		if u := c.reply.usage; u != (vocab.Usage{}) {
			s.ReplyUsage = &u
		}
	}
	for _, cl := range c.batch {
		s.Batch = append(s.Batch, c.callSnapshot(cl))
	}
	for _, cl := range c.bg {
		s.Background = append(s.Background, c.callSnapshot(cl))
	}
	for _, p := range c.work {
		s.Work = append(s.Work, pendingSnapshot{ID: p.id, Kind: p.kind, Turn: p.turn, Claimed: p.claimed,
			Failure: p.failure, Machine: p.machine, Instance: p.instance, Name: p.name, TimerSeq: p.seq, Work: p.work, Waiting: p.waiting})
	}
	return json.Marshal(s)
}

// Restore rebuilds a core from a Snapshot, firing on m. Its first Ready
// re-emits every piece of outstanding work (model requests and tool calls
// in flight, armed timers, pending hooks and approvals, a lane slot
// request), which the adapter starts again; work that waited for a lane
// slot still waits for its grant. No events are emitted. A snapshot of another version, or
// one that does not hold together, is refused with machine.bad_snapshot.
func Restore(data []byte, m *Machines) (*Core, error) {
	if m == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "session: no machines")
	}
	m.reset()
	var s snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: snapshot: %w", err)
	}
	if s.Version != SnapshotVersion {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: snapshot version %d, want %d", s.Version, SnapshotVersion)
	}
	if err := s.Config.Validate(); err != nil {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: snapshot config: %w", err)
	}
	c := &Core{cfg: s.Config, m: m, live: map[vocab.ID]struct{}{}, turnNo: s.TurnNo, step: s.Step, prompt: s.Prompt,
		stepOpen: s.StepOpen, inTurn: s.InTurn, resume: s.Resume, concluded: s.Concluded, lastFinish: s.LastFinish,
		stopReason: s.StopReason, claim: s.Claim, history: s.History, model: s.Model, workSeq: s.WorkSeq,
		seq: s.Seq, now: s.Now, status: s.Status, prompts: s.Prompts, yielded: s.Yielded, slot: s.Slot, slotHeld: s.SlotHeld, closed: s.Closed, opened: s.Opened, header: s.Header, runDeadline: s.RunDeadline, guard: s.Guard}
	var err error
	if c.agent, err = m.agent.Restore(s.Agent); err != nil {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: %w", err)
	}
	if s.Turn != nil {
		if c.turn, err = m.turn.Restore(*s.Turn); err != nil {
			return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: %w", err)
		}
	}
	c.reply.Reset()
	if s.Reply != nil {
		c.reply.msg.Parts = s.Reply.Parts
		c.reply.open = s.ReplyOpen
		c.reply.kind = s.ReplyKind
		c.reply.buf.WriteString(s.ReplyBuf)
		if s.ReplyUsage != nil {
			c.reply.usage = *s.ReplyUsage
		}
	}
	c.reply.sources = s.Sources
	c.used = make(map[vocab.ID]struct{}, len(s.Used))
	c.usedList = s.Used
	for _, id := range s.Used {
		c.used[id] = struct{}{}
	}
	c.indexCalls()
	for _, cs := range s.Batch {
		cl, err := restoreCall(cs, m)
		if err != nil {
			return nil, err
		}
		c.batch = append(c.batch, cl)
	}
	for _, cs := range s.Background {
		cl, err := restoreCall(cs, m)
		if err != nil {
			return nil, err
		}
		c.bg = append(c.bg, cl)
	}
	for _, ps := range s.Work {
		if ps.ID == 0 || ps.ID > c.workSeq {
			return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: work %d outside 1..%d", ps.ID, c.workSeq)
		}
		p := &pending{id: ps.ID, kind: ps.Kind, turn: ps.Turn, claimed: ps.Claimed, failure: ps.Failure,
			machine: ps.Machine, instance: ps.Instance, name: ps.Name, seq: ps.TimerSeq, work: ps.Work, waiting: ps.Waiting}
		if p.kind == WorkHook {
			p.work.History = c.History()
		}
		c.work = append(c.work, p)
		if !p.waiting {
			c.m.rd.Work = append(c.m.rd.Work, p.work)
		}
	}
	// The live ids: queued, claimed, held by a gate hook, or prompts.
	for _, l := range [][]vocab.Message{c.agent.Ctx.NextTurn, c.agent.Ctx.NextStep, c.agent.Ctx.Reminders, c.claim} {
		for _, m := range l {
			c.live[m.ID] = struct{}{}
		}
	}
	for _, p := range c.work {
		for _, m := range p.claimed {
			c.live[m.ID] = struct{}{}
		}
	}
	for _, id := range c.prompts {
		c.live[id] = struct{}{}
	}
	c.prompts = slices.Clip(c.prompts)
	if c.slot != 0 && (c.find(c.slot) == nil || c.find(c.slot).kind != WorkSlot) {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: slot request %d is no outstanding slot work", c.slot)
	}
	if c.yielded != "" && !slices.Contains(c.prompts, c.yielded) {
		return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: yielded prompt %s is not an open prompt", c.yielded)
	}
	return c, nil
}

func (c *Core) callSnapshot(cl *call) callSnapshot {
	cs := callSnapshot{Call: cl.Call, Work: cl.work, Skip: cl.skip, Abort: cl.abort, Access: cl.acc, Ready: cl.ready,
		Launched: cl.launched, Hook: cl.hook, Loop: cl.lg, Blocked: cl.blocked, Note: cl.note}
	if cl.inst != nil {
		t := c.m.tool.Snapshot(cl.inst)
		cs.Inst = &t
	}
	return cs
}

func restoreCall(cs callSnapshot, m *Machines) (*call, error) {
	cl := &call{Call: cs.Call, work: cs.Work, skip: cs.Skip, abort: cs.Abort, acc: cs.Access, ready: cs.Ready,
		launched: cs.Launched, hook: cs.Hook, lg: cs.Loop, blocked: cs.Blocked, note: cs.Note}
	if cs.Inst != nil {
		var err error
		if cl.inst, err = m.tool.Restore(*cs.Inst); err != nil {
			return nil, vocab.Errorf(vocab.CodeBadSnapshot, "session: %w", err)
		}
	}
	return cl, nil
}
