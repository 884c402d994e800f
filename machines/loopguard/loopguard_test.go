package loopguard_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/loopchart/loopchart/machines/loopguard"
	"github.com/loopchart/loopchart/vocab"
)

// TestDetectors runs the tables under testdata/loopguard. Commands:
//
//	run [times=N] [quiet] [verbose]
//	    Each input line is a call spec; the lines run in order, N times
//	    (i = 0..N-1), each as a batch of one: admit, then Block when
//	    critical, else Launched and Finished with the spec's outcome.
//	    Prints the verdict of every admission (runs of "ok" folded); quiet
//	    prints only a summary.
//	record [times=N]
//	    Launched and Finished for each line, without admission (history
//	    made by hand).
//	batch [verbose]
//	    The input lines are one batch: admit; a critical blocks it (Block);
//	    otherwise every call is launched, then finished, in order.
//	admit
//	    Admission only: no Block, nothing launched.
//	newrun | history | warnings [head=N] | roundtrip
//
// A call spec: tool=NAME [args=JSON] [id=ID] [poll] and one outcome:
// result=TEXT (default "ok") | error=TEXT | facts=TEXT | unknown | veto |
// none (not finished). In args and texts, {i}, {i%K} and {i/K} are replaced
// by the iteration number i, i mod K and i div K. Hashes in printed keys
// are shown as <tool args> and <=result>.
func TestDetectors(t *testing.T) {
	datadriven.Walk(t, "../../testdata/loopguard", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.do(d)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return out
		})
	})
}

type harness struct {
	st     loopguard.State
	labels map[string]string // 16-hex hash → readable label
	seq    int
}

func newHarness() *harness { return &harness{labels: map[string]string{}} }

// spec is one parsed call spec.
type spec struct {
	call    loopguard.Call
	args    string
	outcome loopguard.Outcome
	finish  bool
}

func (h *harness) do(d *datadriven.TestData) (string, error) {
	times := 1
	quiet, verbose := false, false
	head := 0
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "times":
			n, err := strconv.Atoi(a.Vals[0])
			if err != nil {
				return "", err
			}
			times = n
		case "quiet":
			quiet = true
		case "verbose":
			verbose = true
		case "head":
			head, _ = strconv.Atoi(a.Vals[0])
		default:
			return "", fmt.Errorf("unknown argument %q", a.Key)
		}
	}
	var lines []string
	for _, l := range strings.Split(d.Input, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	var out printer
	switch d.Cmd {
	case "run":
		sum := map[string]int{}
		n := 0
		for i := range times {
			for _, l := range lines {
				sp, err := h.parse(l, i)
				if err != nil {
					return "", err
				}
				n++
				calls := []loopguard.Call{sp.call}
				a := h.st.Admit(calls)
				v := a.Verdicts[0]
				sum[summaryKey(v)]++
				if !quiet {
					out.verdict(n, sp.call.Tool, h.show(v), v.Level == loopguard.LevelNone)
				}
				if a.Blocked >= 0 {
					h.st.Block(calls, a)
					if !quiet {
						out.line(fmt.Sprintf("   blocked terminate=%v", a.Terminate))
						if verbose {
							out.line("   text: " + oneLine(loopguard.ResultText(a, 0)))
						}
					}
					continue
				}
				if verbose && v.Emit {
					out.line("   note: " + v.Message)
				}
				h.st.Launched(sp.call)
				if sp.finish {
					h.st.Finished(sp.call, sp.outcome)
				}
			}
		}
		if quiet {
			out.line(fmt.Sprintf("%d admissions", n))
			for _, k := range sortedKeys(sum) {
				out.line(fmt.Sprintf("  %s: %d", k, sum[k]))
			}
		}
	case "record":
		for i := range times {
			for _, l := range lines {
				sp, err := h.parse(l, i)
				if err != nil {
					return "", err
				}
				h.st.Launched(sp.call)
				if sp.finish {
					h.st.Finished(sp.call, sp.outcome)
				}
			}
		}
		out.line(fmt.Sprintf("history %d", len(h.st.History)))
	case "batch", "admit":
		var specs []spec
		var calls []loopguard.Call
		for _, l := range lines {
			sp, err := h.parse(l, 0)
			if err != nil {
				return "", err
			}
			specs = append(specs, sp)
			calls = append(calls, sp.call)
		}
		a := h.st.Admit(calls)
		for k, v := range a.Verdicts {
			out.line(fmt.Sprintf("#%d %s: %s", k+1, calls[k].Tool, h.show(v)))
		}
		if a.Blocked < 0 {
			out.line("admitted")
		} else {
			out.line(fmt.Sprintf("blocked by #%d terminate=%v", a.Blocked+1, a.Terminate))
		}
		if d.Cmd == "admit" {
			break
		}
		if a.Blocked >= 0 {
			if verbose {
				for k := range calls {
					out.line(fmt.Sprintf("text #%d: %s", k+1, oneLine(loopguard.ResultText(a, k))))
				}
			}
			h.st.Block(calls, a)
			break
		}
		for _, sp := range specs {
			h.st.Launched(sp.call)
		}
		for _, sp := range specs {
			if sp.finish {
				h.st.Finished(sp.call, sp.outcome)
			}
		}
	case "newrun":
		h.st.NewRun()
		out.line("ok")
	case "history":
		out.line(fmt.Sprintf("%d records, critical seen %v", len(h.st.History), h.st.CriticalSeen))
		for _, r := range h.st.History {
			out.line("  " + h.record(r))
		}
	case "warnings":
		out.line(fmt.Sprintf("%d keys", len(h.st.Warnings)))
		for k, b := range h.st.Warnings {
			if head > 0 && k >= head {
				break
			}
			out.line(fmt.Sprintf("  %s bucket=%d", h.label(b.Key), b.Bucket))
		}
	case "roundtrip":
		b, err := json.Marshal(&h.st)
		if err != nil {
			return "", err
		}
		var back loopguard.State
		if err := json.Unmarshal(b, &back); err != nil {
			return "", err
		}
		b2, _ := json.Marshal(&back)
		if string(b) != string(b2) {
			return "", fmt.Errorf("round trip changed the state:\n%s\n%s", b, b2)
		}
		h.st = back
		out.line(fmt.Sprintf("ok (%d bytes)", len(b)))
	default:
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	return out.String(), nil
}

// oneLine shows line breaks as \n.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", `\n`) }

func summaryKey(v loopguard.Verdict) string {
	if v.Level == loopguard.LevelNone {
		return "ok"
	}
	s := string(v.Level) + " " + string(v.Detector)
	if v.Level == loopguard.LevelWarning {
		if v.Emit {
			s += " emitted"
		} else {
			s += " silent"
		}
	}
	return s
}

func sortedKeys(m map[string]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// show renders a verdict.
func (h *harness) show(v loopguard.Verdict) string {
	if v.Level == loopguard.LevelNone {
		if v.Detector != "" || v.Count != 0 || v.Key != "" || v.Emit || v.Message != "" {
			return fmt.Sprintf("BAD EMPTY VERDICT %+v", v)
		}
		return "ok"
	}
	s := fmt.Sprintf("%s %s %d %s", v.Level, v.Detector, v.Count, h.label(v.Key))
	if v.Variants > 0 {
		s += fmt.Sprintf(" variants=%d", v.Variants)
	}
	if v.Emit {
		s += " emit"
		if v.Message == "" {
			s += " (NO MESSAGE)"
		}
	} else if v.Message != "" {
		s += " (MESSAGE WITHOUT EMIT)"
	}
	return s
}

func (h *harness) record(r loopguard.Record) string {
	s := fmt.Sprintf("%s %s", r.ID, h.label(r.Args.String()))
	switch {
	case r.Veto:
		s += " veto"
	case r.HasResult:
		s += " " + h.label(r.Result.String())
		if r.NoProgress {
			s += " no-progress"
		}
		if r.Unknown != "" {
			s += " unknown=" + r.Unknown
		}
	default:
		s += " running"
	}
	return s
}

// label replaces the known hashes in s by their labels.
func (h *harness) label(s string) string {
	for hex, l := range h.labels {
		s = strings.ReplaceAll(s, hex, "<"+l+">")
	}
	return s
}

// expand replaces {i}, {i%K} and {i/K}.
func expand(s string, i int) (string, error) {
	var b strings.Builder
	for {
		k := strings.Index(s, "{i")
		if k < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		end := strings.IndexByte(s[k:], '}')
		if end < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		expr := s[k+2 : k+end]
		v := i
		switch {
		case expr == "":
		case expr[0] == '%' || expr[0] == '/':
			n, err := strconv.Atoi(expr[1:])
			if err != nil || n == 0 {
				return "", fmt.Errorf("bad placeholder {i%s}", expr)
			}
			if expr[0] == '%' {
				v = i % n
			} else {
				v = i / n
			}
		default:
			b.WriteString(s[:k+2])
			s = s[k+2:]
			continue
		}
		b.WriteString(s[:k])
		b.WriteString(strconv.Itoa(v))
		s = s[k+end+1:]
	}
}

// parse reads a call spec for iteration i.
func (h *harness) parse(line string, i int) (spec, error) {
	h.seq++
	sp := spec{args: "{}", finish: true}
	sp.call.ID = "c" + strconv.Itoa(h.seq)
	res := vocab.ToolResult{Content: "ok"}
	for _, tok := range strings.Fields(line) {
		key, val, _ := strings.Cut(tok, "=")
		val, err := expand(val, i)
		if err != nil {
			return sp, err
		}
		switch key {
		case "tool":
			sp.call.Tool = val
		case "args":
			sp.args = val
		case "id":
			sp.call.ID = val
		case "poll":
			sp.call.Poll = true
		case "result":
			res = vocab.ToolResult{Content: val}
		case "error":
			res = vocab.ToolResult{Content: val, IsError: true, Code: vocab.CodeToolFailed}
		case "facts":
			res = vocab.ToolResult{Content: "changing " + strconv.Itoa(h.seq), Facts: val}
		case "unknown":
			res = vocab.ToolResult{Content: "unknown tool", IsError: true, Code: vocab.CodeToolUnknown}
		case "veto":
			res = vocab.ToolResult{Content: "denied", IsError: true, Code: vocab.CodeToolDenied}
		case "none":
			sp.finish = false
		default:
			return sp, fmt.Errorf("unknown spec word %q in %q", key, line)
		}
	}
	if sp.call.Tool == "" {
		return sp, fmt.Errorf("no tool in %q", line)
	}
	res.Name = sp.call.Tool
	sp.call.ArgsHash = loopguard.HashArgs(sp.call.Tool, json.RawMessage(sp.args))
	sp.outcome = loopguard.OutcomeOf(res, nil)
	h.labels[loopguard.Hash(sp.call.ArgsHash).String()] = sp.call.Tool + " " + sp.args
	if sp.outcome.HasResult {
		text := res.Content
		switch {
		case res.Facts != "":
			text = "facts " + res.Facts
		case res.IsError:
			text = "error " + res.Content
		}
		h.labels[loopguard.Hash(sp.outcome.ResultHash).String()] = "=" + text
	}
	return sp, nil
}

// printer folds runs of "ok" admissions.
type printer struct {
	b              strings.Builder
	okFrom, okLast int
}

func (p *printer) flush() {
	if p.okFrom == 0 {
		return
	}
	if p.okFrom == p.okLast {
		fmt.Fprintf(&p.b, "#%d ok\n", p.okFrom)
	} else {
		fmt.Fprintf(&p.b, "#%d..#%d ok\n", p.okFrom, p.okLast)
	}
	p.okFrom, p.okLast = 0, 0
}

func (p *printer) verdict(n int, tool, text string, ok bool) {
	if ok {
		if p.okFrom == 0 {
			p.okFrom = n
		}
		p.okLast = n
		return
	}
	p.flush()
	fmt.Fprintf(&p.b, "#%d %s: %s\n", n, tool, text)
}

func (p *printer) line(s string) {
	p.flush()
	p.b.WriteString(s)
	p.b.WriteByte('\n')
}

func (p *printer) String() string {
	p.flush()
	return p.b.String()
}
