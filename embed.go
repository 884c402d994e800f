// Package loopchart runs an LLM agent's main loop as explicit statecharts.
// The library's packages are vocab (the shared words), machines (the pure
// statecharts), adapters (the session engine, providers, tools), agentsvc
// (the public API) and hooks; cmd/loopchart is the CLI.
//
// This root package only embeds the files the CLI ships with.
package loopchart

import _ "embed"

// DemoScript is testdata/scripts/demo.json: the scripted session the CLI's
// demo runs by default.
//
//go:embed testdata/scripts/demo.json
var DemoScript []byte
