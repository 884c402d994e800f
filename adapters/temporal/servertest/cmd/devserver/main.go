// Command devserver starts a local Temporal server for development, for
// machines where the Temporal CLI (`temporal server start-dev`) is not
// available. It embeds Temporal's own server (go.temporal.io/server) through
// its temporaltest package, backed by an in-memory SQLite database.
//
// Usage, from the repository root:
//
//	cd adapters/temporal && go run ./servertest/cmd/devserver
//
// The go.work file in adapters/temporal ties this module to the main module
// and the Temporal adapter; the first run compiles the whole server and takes
// several minutes, later runs use the build cache.
//
// Flags:
//
//	-namespace name   namespace to register and serve (default "default")
//	-retention d      workflow execution retention of that namespace
//	                  (default 24h, at least 1h, the server's minimum)
//
// Once the server accepts requests for the namespace, devserver prints exactly
// one line to stdout, for scripts to parse:
//
//	temporal dev server on 127.0.0.1:PORT namespace NAME
//
// and runs until it receives SIGINT (Ctrl-C) or SIGTERM, then stops the server
// and exits with status 0. A second signal during shutdown kills it at once.
// Invalid flags exit with status 2, a failure to start with status 1.
//
// Server logs of level warn and above go to stderr; nothing else is printed
// to stdout. Expect a few at start: one about the Nexus HTTP port not being
// set, and sometimes transient "Frontend is not healthy yet" errors from the
// server's internal worker service. Logs written while the server shuts down
// are dropped: its graceful stop logs a burst of spurious connection errors
// from its internal workers.
//
// Limitations:
//
//   - The frontend address cannot be chosen: temporaltest always listens on
//     127.0.0.1 on a free port picked by the system (its internal LiteServer
//     has a FrontendPort setting, but temporaltest does not expose it, and the
//     temporal.WithConfig server option would replace the whole SQLite
//     configuration). Read the address from the printed line; it changes on
//     every run.
//   - Everything is in memory: all namespaces, workflows and history are lost
//     when the process exits.
//   - temporaltest also registers a namespace of its own, named
//     temporaltest-N with a random N; it is harmless and can be ignored.
//   - It is for development only: no TLS, no authorization, one history shard,
//     and the server's periodic version check (which would call out to the
//     internet) is turned off.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.temporal.io/server/common/primitives/timestamp"
	"go.temporal.io/server/temporal"
	"go.temporal.io/server/temporaltest"
)

const (
	// minRetention is the server's default system.namespaceMinRetentionLocal:
	// RegisterNamespace rejects a shorter retention for a local namespace.
	minRetention = time.Hour
	// maxNamespaceLen is the server's default limit.maxIDLength, which the
	// frontend applies to namespace names.
	maxNamespaceLen = 1000
	// readyTimeout bounds the registration of the namespace and the wait until
	// the server serves it.
	readyTimeout = time.Minute
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default behaviour so that a
		// second one kills the process even if the shutdown hangs.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run starts the server with the command-line arguments args, prints the
// ready line to stdout and serves until ctx is done. It returns the exit
// status: 0 after a clean stop, 1 if the server fails, 2 for invalid flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (status int) {
	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	namespace := fs.String("namespace", "default", "namespace to register and serve")
	retention := fs.Duration("retention", 24*time.Hour, "workflow execution retention of the namespace (at least 1h)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: devserver [-namespace name] [-retention duration]\n\n"+
			"Starts an in-memory Temporal server for development on 127.0.0.1 (port chosen\n"+
			"by the system), prints \"temporal dev server on ADDR namespace NAME\" to stdout\n"+
			"once it is ready, and runs until SIGINT or SIGTERM. All state is lost on exit.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the error and the usage
	}
	if err := validate(*namespace, *retention, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "devserver: %v\n", err)
		fmt.Fprintf(stderr, "Run 'devserver -h' for usage.\n")
		return 2
	}

	logger := newLogger(stderr)
	ts, err := startServer(logger)
	if err != nil {
		fmt.Fprintf(stderr, "devserver: starting the Temporal server: %v\n", err)
		return 1
	}
	defer func() {
		logger.mute()
		if err := stopServer(ts); err != nil {
			fmt.Fprintf(stderr, "devserver: stopping the Temporal server: %v\n", err)
			status = 1
		}
	}()

	if err := registerNamespace(ctx, ts, *namespace, *retention); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "devserver: interrupted before the server was ready\n")
		} else {
			fmt.Fprintf(stderr, "devserver: %v\n", err)
		}
		return 1
	}

	if _, err := fmt.Fprintf(stdout, "temporal dev server on %s namespace %s\n",
		ts.GetFrontendHostPort(), *namespace); err != nil {
		fmt.Fprintf(stderr, "devserver: writing to stdout: %v\n", err)
		return 1
	}

	<-ctx.Done()
	return 0
}

// validate checks the flag values and that there are no positional arguments.
func validate(namespace string, retention time.Duration, rest []string) error {
	if len(rest) > 0 {
		return fmt.Errorf("unexpected argument %q: devserver takes only flags", rest[0])
	}
	switch {
	case namespace == "":
		return errors.New("-namespace must not be empty")
	case len(namespace) > maxNamespaceLen:
		return fmt.Errorf("-namespace is %d bytes long, the server accepts at most %d", len(namespace), maxNamespaceLen)
	case !utf8.ValidString(namespace):
		return fmt.Errorf("-namespace %q is not valid UTF-8", namespace)
	case strings.IndexFunc(namespace, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("-namespace %q must not contain spaces or control characters", namespace)
	}
	if retention < minRetention {
		return fmt.Errorf("-retention %v is below the server's minimum of %v", retention, minRetention)
	}
	return nil
}

// startServer starts an in-memory server on 127.0.0.1. temporaltest panics
// when it fails (it reports errors through testing.T, and there is none here),
// so the panic is turned back into an error.
func startServer(logger log.Logger) (ts *temporaltest.TestServer, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return temporaltest.NewServer(temporaltest.WithBaseServerOptions(
		// Both options replace the ones temporaltest sets itself, because the
		// server applies its options in order.
		temporal.WithLogger(logger),
		temporal.WithDynamicConfigClient(dynamicconfig.StaticClient{
			// Kept from temporaltest's own dynamic config.
			dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): []dynamicconfig.ConstrainedValue{{Value: true}},
			// The version check calls a Temporal web service once a day.
			dynamicconfig.EnableServerVersionCheck.Key(): []dynamicconfig.ConstrainedValue{{Value: false}},
		}),
	)), nil
}

// stopServer closes temporaltest's clients and stops the server. On a failed
// stop TestServer.Stop logs through its nil testing.T and panics; the panic
// is returned as an error.
func stopServer(ts *temporaltest.TestServer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	ts.Stop()
	return nil
}

// registerNamespace registers namespace (unless it exists already) and waits
// until the frontend serves requests for it.
func registerNamespace(ctx context.Context, ts *temporaltest.TestServer, namespace string, retention time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	c, err := defaultClient(ts)
	if err != nil {
		return fmt.Errorf("connecting to the server: %w", err)
	}
	svc := c.WorkflowService()

	_, err = svc.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        namespace,
		Description:                      "registered by devserver",
		WorkflowExecutionRetentionPeriod: timestamp.DurationPtr(retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("registering namespace %q: %w", namespace, err)
	}

	// DescribeNamespace reads the database; listing workflows also goes
	// through the frontend's namespace registry and the visibility store,
	// which is what workers and clients use.
	ready := func() error {
		if _, err := svc.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
			return err
		}
		_, err := svc.ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, PageSize: 1})
		return err
	}
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %q not usable after %v: %w", namespace, readyTimeout, err)
		case <-retry.C:
		}
	}
}

// defaultClient returns temporaltest's default client, which panics rather
// than failing without a testing.T.
func defaultClient(ts *temporaltest.TestServer) (c client.Client, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return ts.GetDefaultClient(), nil
}

// Levels of the server's Panic and Fatal records; slog shows them as ERROR+4
// and ERROR+8.
const (
	levelPanic = slog.LevelError + 4
	levelFatal = slog.LevelError + 8
)

// slogLogger is a server logger that writes records of level warn and above
// as text lines to a writer, until it is muted.
type slogLogger struct {
	l     *slog.Logger
	muted *atomic.Bool // shared by the loggers derived with With
}

var (
	_ log.Logger     = slogLogger{}
	_ log.WithLogger = slogLogger{}
)

func newLogger(w io.Writer) slogLogger {
	return slogLogger{
		l:     slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})),
		muted: new(atomic.Bool),
	}
}

// mute drops every later record of level below panic, from this logger and
// the ones derived from it.
func (s slogLogger) mute() { s.muted.Store(true) }

func (s slogLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	if level < levelPanic && s.muted.Load() {
		return
	}
	s.l.Log(context.Background(), level, msg, attrs(tags)...)
}

func attrs(tags []tag.Tag) []any {
	a := make([]any, len(tags))
	for i, t := range tags {
		a[i] = slog.Any(t.Key(), t.Value())
	}
	return a
}

func (s slogLogger) Debug(string, ...tag.Tag) {}
func (s slogLogger) Info(string, ...tag.Tag)  {}

func (s slogLogger) Warn(msg string, tags ...tag.Tag)   { s.log(slog.LevelWarn, msg, tags) }
func (s slogLogger) Error(msg string, tags ...tag.Tag)  { s.log(slog.LevelError, msg, tags) }
func (s slogLogger) DPanic(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// Panic and Fatal keep the meaning they have with the server's zap logger,
// and are written even when the logger is muted.
func (s slogLogger) Panic(msg string, tags ...tag.Tag) {
	s.log(levelPanic, msg, tags)
	panic(msg)
}

func (s slogLogger) Fatal(msg string, tags ...tag.Tag) {
	s.log(levelFatal, msg, tags)
	os.Exit(1)
}

func (s slogLogger) With(tags ...tag.Tag) log.Logger {
	return slogLogger{l: s.l.With(attrs(tags)...), muted: s.muted}
}
