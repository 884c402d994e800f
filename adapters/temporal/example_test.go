package temporal_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// Example wires a worker and a client on the task queue "demo" and runs one
// prompt of session "s1". It needs a Temporal server at localhost:7233, so
// it has no Output line: go test compiles it but does not run it. The same
// code is in the README's section "Running on Temporal".
func Example() {
	ctx := context.Background()
	c, err := client.Dial(client.Options{HostPort: "localhost:7233", Namespace: "default"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Worker side: the provider, the tools and the content store are code
	// registered on every worker of the queue, never sent by clients.
	script, err := scripted.Load("demo.json") // or any vocab.Provider
	if err != nil {
		log.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.FileTools(os.DirFS("."))...)
	if err != nil {
		log.Fatal(err)
	}
	content, err := lt.OpenSQLiteContent(ctx, "loopchart-content.db")
	if err != nil {
		log.Fatal(err)
	}
	defer content.Close()
	w := worker.New(c, "demo", worker.Options{})
	err = lt.Register(w, &lt.Activities{Provider: scripted.New(script, nil), Tools: reg, Content: content})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	// Client side: calls on a session id. The session's tool specs are the
	// specs of the worker's tools.
	lc, err := lt.NewClient(c, "demo")
	if err != nil {
		log.Fatal(err)
	}
	if err := lc.Start(ctx, session.Config{Session: "s1", Tools: reg.Specs()}, lt.StartOptions{}); err != nil {
		log.Fatal(err)
	}
	ack, err := lc.Submit(ctx, "s1", vocab.UserText("Count the words of go.mod."))
	if err != nil {
		log.Fatal(err)
	}
	res, err := lc.Wait(ctx, "s1", ack.ID)
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := lc.History(ctx, "s1")
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s: %s\n", m.Role, m.Text())
	}
	fmt.Println(res) // completed{steps=2}
	if err := lc.Close(ctx, "s1"); err != nil {
		log.Fatal(err)
	}
	if _, err := lc.WaitClosed(ctx, "s1"); err != nil {
		log.Fatal(err)
	}
}
