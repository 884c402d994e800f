package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing/fstest"
	"time"

	"github.com/loopchart/loopchart"
	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// demoFiles is the demo's read-only workspace.
var demoFiles = fstest.MapFS{
	"notes.txt":     {Data: []byte("loopchart runs the agent loop as explicit statecharts: every phase is a named state.\n")},
	"docs/todo.txt": {Data: []byte("draw the turn machine\nwrite the tables\n")},
}

func demoCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	scriptPath := fs.String("script", "", "run this script instead of the embedded demo")
	events := fs.String("events", "", `"json" prints the raw event stream as JSON lines`)
	color := fs.Bool("color", false, "colour the timeline (NO_COLOR disables)")
	instant := fs.Bool("instant", false, "run on a virtual clock: no real waiting")
	prompt := fs.String("prompt", "How long is notes.txt?", "the prompt to submit")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *events != "" && *events != "json" {
		return fmt.Errorf("%w: --events takes only json", errUsage)
	}
	var (
		script *scripted.Script
		err    error
	)
	if *scriptPath != "" {
		script, err = scripted.Load(*scriptPath)
	} else {
		script, err = scripted.Parse(loopchart.DemoScript, "testdata/scripts/demo.json")
	}
	if err != nil {
		return err
	}
	var clk clock.Clock = clock.Real()
	var fake *clock.Fake
	if *instant {
		fake = clock.NewFake(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
		clk = fake
	}
	svc, err := agentsvc.New(agentsvc.Options{
		Provider: scripted.New(script, clk),
		Tools:    tools.FileTools(demoFiles),
		Clock:    clk,
		Model:    "scripted",
	})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if fake != nil {
		go func() {
			for runCtx.Err() == nil {
				if fake.WaitForPending(runCtx, 1) != nil {
					return
				}
				fake.AdvanceToNext()
			}
		}()
	}
	printed := make(chan struct{})
	stream := svc.Events(runCtx, 0)
	var streamErr error
	start := clk.Now()
	go func() {
		defer close(printed)
		tl := &timeline{w: stdout, color: *color && os.Getenv("NO_COLOR") == "", start: start}
		enc := json.NewEncoder(stdout)
		for ev, err := range stream {
			if err != nil {
				streamErr = err // never a silent gap: the run fails
				return
			}
			if *events == "json" {
				_ = enc.Encode(ev)
			} else {
				tl.print(ev)
			}
			if ev.Kind == vocab.EventAgentEnd {
				return // the agent is idle again
			}
		}
	}()
	p, err := svc.SubmitText(*prompt)
	if err != nil {
		svc.Close(context.Background())
		return err
	}
	res, err := p.Wait(ctx)
	if err != nil {
		svc.Close(context.Background()) // interrupted: stop the session cleanly
		return err
	}
	<-printed
	if err := svc.Close(context.Background()); err != nil {
		return err
	}
	if streamErr != nil {
		return fmt.Errorf("event stream: %w", streamErr)
	}
	if *events != "json" {
		fmt.Fprintf(stdout, "\nresult: %s\n", displayText(res.String(), 0))
	}
	if res.Kind != vocab.PromptCompleted {
		return errors.New("the demo prompt did not complete: " + displayText(res.String(), 0))
	}
	return nil
}

// timeline renders events as readable lines.
type timeline struct {
	w     io.Writer
	color bool
	start time.Time
}

const (
	dim    = "\x1b[2m"
	bold   = "\x1b[1m"
	cyan   = "\x1b[36m"
	yellow = "\x1b[33m"
	green  = "\x1b[32m"
	red    = "\x1b[31m"
	reset  = "\x1b[0m"
)

func (t *timeline) paint(c, s string) string {
	if !t.color {
		return s
	}
	return c + s + reset
}

func (t *timeline) line(ev vocab.Event, c, text string) {
	where := ""
	if ev.Turn > 0 {
		where = fmt.Sprintf("turn %d", ev.Turn)
		if ev.Step > 0 {
			where += fmt.Sprintf(" step %d", ev.Step)
		}
	}
	fmt.Fprintf(t.w, "%s %-15s %s\n", t.paint(dim, fmt.Sprintf("%7.3fs", ev.At.Sub(t.start).Seconds())), where, t.paint(c, text))
}

func (t *timeline) print(ev vocab.Event) {
	switch p := ev.Payload.(type) {
	case vocab.TransitionPayload:
		who := p.Machine
		if p.Instance != "" {
			who += " " + displayText(p.Instance, 0) // a tool call id, from the model
		}
		if p.From == p.To {
			return // internal transitions stay in the raw event stream
		}
		guard := ""
		if p.Guard != "" {
			guard = " [" + p.Guard + "]"
		}
		t.line(ev, cyan, fmt.Sprintf("%-6s %s → %s  (%s%s)", who, p.From, p.To, p.Trigger, guard))
	case vocab.MessagePayload:
		switch ev.Kind {
		case vocab.EventUserMessage:
			t.line(ev, bold, "user: "+displayText(p.Message.Text(), 100))
		case vocab.EventAssistant:
			if txt := p.Message.Text(); strings.TrimSpace(txt) != "" {
				t.line(ev, bold, "assistant: "+displayText(txt, 100))
			}
			for _, c := range p.Message.ToolCalls() {
				t.line(ev, yellow, fmt.Sprintf("call %s %s(%s)", displayText(c.ID, 0), displayText(c.Name, 0), displayText(string(c.Args), 0)))
			}
		}
	case vocab.ToolPayload:
		if ev.Kind == vocab.EventToolResult && p.Result != nil {
			c := green
			if p.Result.IsError {
				c = red
			}
			t.line(ev, c, fmt.Sprintf("result %s: %s", displayText(p.Result.CallID, 0), displayText(p.Result.Content, 100)))
		}
	case vocab.RetryPayload:
		t.line(ev, red, fmt.Sprintf("retry: attempt %d failed (%s: %s); attempt %d/%d in %s", p.FailedAttempt, displayText(string(p.Code), 0), displayText(p.Message, 0), p.NextAttempt, p.MaxAttempts, p.Delay))
	case vocab.UsagePayload:
		t.line(ev, dim, fmt.Sprintf("usage: %d in, %d out", p.Usage.InputTokens, p.Usage.OutputTokens))
	case vocab.TurnEndPayload:
		t.line(ev, bold, fmt.Sprintf("turn end: %s after %d steps", displayText(p.Reason.String(), 0), p.Steps))
	}
}
