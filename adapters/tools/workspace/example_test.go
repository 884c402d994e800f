package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/vocab"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "workspace-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	ws, err := workspace.Open(dir, workspace.Options{})
	if err != nil {
		panic(err)
	}
	defer ws.Close()

	tools := map[string]vocab.Tool{}
	for _, t := range ws.Tools() {
		tools[t.Spec().Name] = t
	}
	call := func(name string, args map[string]any) {
		raw, _ := json.Marshal(args)
		res, err := tools[name].Run(context.Background(), vocab.ToolCall{ID: "1", Name: name, Args: raw}, nil)
		if err != nil {
			panic(err)
		}
		if res.IsError {
			fmt.Printf("%s error (%s): %s\n", name, res.Code, res.Content)
			return
		}
		fmt.Printf("%s:\n%s\n", name, res.Content)
	}

	call("write_file", map[string]any{"path": "src/greet.go", "content": "package src\n\nconst Greeting = \"hello\"\n"})
	call("edit_file", map[string]any{"path": "src/greet.go", "old": `"hello"`, "new": `"hello, world"`})
	call("read_file", map[string]any{"path": "src/greet.go", "offset_line": 3})
	call("list_dir", map[string]any{"recursive": true})
	call("grep", map[string]any{"pattern": "Greeting", "glob": "*.go"})
	call("read_file", map[string]any{"path": "../outside.txt"})
	// Output:
	// write_file:
	// created src/greet.go (38 bytes)
	// edit_file:
	// edited src/greet.go: replaced 1 occurrence at line 3
	// read_file:
	//      3	const Greeting = "hello, world"
	//
	// list_dir:
	// src/
	// src/greet.go
	//
	// grep:
	// src/greet.go:3: const Greeting = "hello, world"
	//
	// read_file error (tool.refused): refused "../outside.txt": the path leaves the workspace (through ".."); use a path inside it
}
