package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/loopchart/loopchart/adapters/inspect"
)

// defaultInspectAddr is where `loopchart inspect` serves by default: the
// loopback interface only.
const defaultInspectAddr = "127.0.0.1:7777"

// inspectListening, when set (by tests), is told the address the inspector
// listens on once it does.
var inspectListening func(addr string)

// inspectShutdown bounds the graceful shutdown of the inspector's server.
const inspectShutdown = 5 * time.Second

// inspectCmd serves the session inspector of a log until ctx ends (Ctrl-C),
// then shuts the server down, ending the open event streams.
func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("inspect", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	db := flags.String("db", defaultDB, "the SQLite log to inspect (it must exist; it is only read)")
	addr := flags.String("addr", defaultInspectAddr, "the address to serve on")
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%w: inspect takes no arguments, got %q", errUsage, flags.Args())
	}
	if *db == "" {
		return fmt.Errorf("%w: --db needs a file name", errUsage)
	}
	h, err := inspect.New(inspect.Options{DB: *db})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no log database %s (loopchart demo --db %s writes one)", *db, *db)
	}
	if err != nil {
		return err
	}
	defer h.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           inspect.LocalOnly(h),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	url := "http://" + browserHost(ln.Addr()) + "/"
	fmt.Fprintf(stderr, "inspecting %s (read-only); only localhost, 127.0.0.1 and [::1] are served; Ctrl-C stops\n", *db)
	fmt.Fprintln(stdout, url)
	if inspectListening != nil {
		inspectListening(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	// End the streams first: Shutdown waits for the requests in flight.
	h.Close()
	sctx, cancel := context.WithTimeout(context.Background(), inspectShutdown)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// browserHost is the host:port to put in the inspector's URL: a
// wildcard address is reached as localhost.
func browserHost(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
