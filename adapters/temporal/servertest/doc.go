// Package servertest holds loopchart's tests against a real in-process Temporal server.
package servertest
