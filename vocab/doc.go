// Package vocab holds the words every layer of loopchart speaks: identifiers,
// messages and their parts, tool calls and results, token usage, finish and
// turn-end reasons, cancel causes, the event envelope and the stable error
// codes.
//
// vocab imports nothing from this module. It holds data and the small pure
// functions that belong to that data; behaviour lives in machines/ (the pure
// statecharts) and adapters/ (everything that touches the world).
package vocab
