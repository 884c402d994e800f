// Package wiretest serves recorded provider responses to the adapters'
// tests through httptest, and records what the adapters sent.
//
// A fixture is one HTTP response as it travels on the wire: a status
// line, headers, a blank line and the body (a server-sent event stream or
// a JSON error). Lines may end in "\n" or "\r\n". Lines before the status
// line that start with '#' are comments.
package wiretest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Request is one request an adapter sent.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Server replays fixtures, one per request, in order.
type Server struct {
	*httptest.Server
	t        testing.TB
	mu       sync.Mutex
	fixtures [][]byte
	reqs     []Request
}

// Serve starts a server that answers the n-th request with the n-th
// fixture file; a request beyond the last fails the test. The server is
// closed when the test ends.
func Serve(t testing.TB, files ...string) *Server {
	t.Helper()
	s := &Server{t: t}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s.fixtures = append(s.fixtures, b)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
	if n >= len(s.fixtures) {
		s.t.Errorf("wiretest: request %d %s %s has no fixture", n+1, r.Method, r.URL.Path)
		http.Error(w, "no fixture", http.StatusTeapot)
		return
	}
	resp, err := Parse(s.fixtures[n])
	if err != nil {
		s.t.Errorf("wiretest: fixture %d: %v", n+1, err)
		http.Error(w, err.Error(), http.StatusTeapot)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	_, _ = w.Write(b)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Parse reads a fixture into a response.
func Parse(b []byte) (*http.Response, error) {
	for bytes.HasPrefix(b, []byte("#")) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			b = nil
			break
		}
		b = b[i+1:]
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		return nil, err
	}
	resp.Header.Del("Content-Length") // hand-written bodies are not counted
	return resp, nil
}

// Canonical re-encodes a JSON document with sorted keys and no
// insignificant space, so two encodings of the same value compare equal.
func Canonical(t testing.TB, b []byte) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("wiretest: not JSON: %v\n%s", err, b)
	}
	out, err := json.MarshalIndent(v, "", "  ") // maps encode with sorted keys
	if err != nil {
		t.Fatal(err)
	}
	return string(out) + "\n"
}

// Headers returns the named headers of h as "Name: value" lines, sorted;
// the SDKs' other headers carry versions and platforms and are left out.
func Headers(h http.Header, allow ...string) string {
	var lines []string
	for _, k := range allow {
		for _, v := range h.Values(k) {
			lines = append(lines, http.CanonicalHeaderKey(k)+": "+v)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// Golden compares got with the file at path; with update set it writes
// the file instead.
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update to accept):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}
