// Package peers benchmarks loopchart's agent loop side by side with a peer
// Go agent loop (eino's ReAct agent) on the same fake model and no-op tool.
// It is a separate module so that loopchart itself never depends on eino;
// see README.md. The benchmarks live in peers_test.go.
package peers
