package otelchart_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelchart "github.com/loopchart/loopchart/adapters/otel"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// newExampleService starts a session whose model asks for one echo call,
// then answers.
func newExampleService() *agentsvc.Service {
	s, err := scripted.Parse([]byte(`{"steps": [
		{"tool_calls": [{"id": "c1", "name": "echo", "args": {"text": "hi"}}]},
		{"parts": [{"text": "It says hi."}]}]}`), "example")
	if err != nil {
		panic(err)
	}
	svc, err := agentsvc.New(agentsvc.Options{Provider: scripted.New(s, nil), Tools: []vocab.Tool{echoTool()}, Model: "scripted"})
	if err != nil {
		panic(err)
	}
	return svc
}

// Observe a service: a tracer provider (here one that keeps spans in
// memory) with the observer's ID generator, an observer, and a goroutine
// that follows the service's events.
func Example() {
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter), sdktrace.WithIDGenerator(otelchart.IDGenerator(nil)))
	obs, _ := otelchart.New(otelchart.Options{TracerProvider: tp})
	svc := newExampleService()
	done := make(chan error)
	go func() { done <- obs.ObserveService(ctx, svc) }()

	p, _ := svc.SubmitText("Echo hi.")
	p.Wait(ctx)
	svc.Close(ctx) // the event stream ends: ObserveService returns
	<-done
	for _, s := range exporter.GetSpans() { // in the order they ended
		fmt.Println(s.Name)
	}
	// Output:
	// chat scripted
	// execute_tool echo
	// step
	// chat scripted
	// step
	// turn
	// invoke_agent
}
