package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/log/tag"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of the server's
// logger and of run.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var readyLine = regexp.MustCompile(`^temporal dev server on (\S+) namespace (\S+)$`)

func TestRunServesNamespace(t *testing.T) {
	const (
		namespace = "loopchart-dev"
		retention = 48 * time.Hour
		// Generous bounds for a loaded 2-core machine; they only turn a hang
		// into a failure.
		startTimeout = 2 * time.Minute
		stopTimeout  = time.Minute
	)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pr, pw := io.Pipe()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"-namespace", namespace, "-retention", retention.String()}, pw, &stderr)
		pw.Close()
		exit <- code
	}()

	// Every line run prints to stdout, in order; closed at EOF.
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			code := <-exit
			t.Fatalf("run exited with %d before printing the ready line; stderr:\n%s", code, stderr.String())
		}
		line = l
	case <-time.After(startTimeout):
		t.Fatalf("no ready line after %v; stderr:\n%s", startTimeout, stderr.String())
	}

	m := readyLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("ready line %q does not match %v", line, readyLine)
	}
	addr, gotNamespace := m[1], m[2]
	if gotNamespace != namespace {
		t.Errorf("ready line namespace = %q, want %q", gotNamespace, namespace)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("ready line address %q: %v", addr, err)
	}
	if host != "127.0.0.1" {
		t.Errorf("server listens on host %q, want 127.0.0.1", host)
	}

	c, err := client.Dial(client.Options{
		HostPort:  addr,
		Namespace: namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))),
	})
	if err != nil {
		t.Fatalf("client.Dial(%s): %v", addr, err)
	}
	callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
	defer callCancel()
	resp, err := c.WorkflowService().DescribeNamespace(callCtx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		c.Close()
		t.Fatalf("DescribeNamespace(%q): %v", namespace, err)
	}
	// The namespace is usable right away: a workflow can be started in it (no
	// worker runs it) and terminated.
	we, err := c.ExecuteWorkflow(callCtx, client.StartWorkflowOptions{ID: "devserver-test", TaskQueue: "devserver-test"}, "NoSuchWorkflow")
	if err != nil {
		t.Errorf("ExecuteWorkflow in %q: %v", namespace, err)
	} else if err := c.TerminateWorkflow(callCtx, we.GetID(), we.GetRunID(), "test done"); err != nil {
		t.Errorf("TerminateWorkflow: %v", err)
	}
	c.Close()
	if got := resp.GetNamespaceInfo().GetName(); got != namespace {
		t.Errorf("described namespace name = %q, want %q", got, namespace)
	}
	if got := resp.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != retention {
		t.Errorf("namespace retention = %v, want %v", got, retention)
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("run returned %d after cancel, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(stopTimeout):
		t.Fatalf("run did not return %v after cancel; stderr:\n%s", stopTimeout, stderr.String())
	}
	var extra []string
	for l := range lines {
		extra = append(extra, l)
	}
	if len(extra) > 0 {
		t.Errorf("stdout has lines after the ready line, want exactly one: %q", extra)
	}
	if s := stderr.String(); s != "" {
		t.Logf("stderr (server warnings):\n%s", s)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown flag", []string{"-port", "7233"}, "flag provided but not defined: -port"},
		{"empty namespace", []string{"-namespace", ""}, "-namespace must not be empty"},
		{"namespace with space", []string{"-namespace", "my ns"}, "must not contain spaces"},
		{"namespace too long", []string{"-namespace", strings.Repeat("n", 1001)}, "the server accepts at most 1000"},
		{"bad retention", []string{"-retention", "soon"}, `invalid value "soon" for flag -retention`},
		{"short retention", []string{"-retention", "30m"}, "-retention 30m0s is below the server's minimum of 1h0m0s"},
		{"positional argument", []string{"start"}, `unexpected argument "start"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// A context that is already done: a bad flag must be reported
			// before anything else happens.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if code := run(ctx, tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("run(%q) = %d, want 2", tc.args, code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q) stderr = %q, want it to contain %q", tc.args, stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("run(%q) wrote to stdout: %q", tc.args, stdout.String())
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &stdout, &stderr); code != 0 {
		t.Errorf("run(-h) = %d, want 0", code)
	}
	if !strings.Contains(stderr.String(), "usage: devserver") {
		t.Errorf("run(-h) stderr = %q, want the usage", stderr.String())
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger(&buf)
	derived := l.With(tag.NewStringTag("service", "frontend"))
	l.Debug("debug record")
	l.Info("info record")
	derived.Warn("warn record", tag.NewStringTag("key", "value"))
	l.Error("error record", tag.Error(errors.New("boom")))
	l.mute()
	derived.Warn("muted warn record")
	l.Error("muted error record")

	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="warn record" service=frontend key=value`,
		`level=ERROR msg="error record" error=boom`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log output does not contain %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"debug record", "info record", "muted"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("log output contains %q:\n%s", unwanted, out)
		}
	}
}
