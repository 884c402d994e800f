package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// ReadOutputName is the name of the tool ReadOutput makes, which the
// registry names when it spills an output.
const ReadOutputName = "read_output"

// ReadOutputArgs are the arguments of read_output.
type ReadOutputArgs struct {
	// Ref is the stored output's ref, "sha256:<64 hex digits>".
	Ref string `json:"ref"`
	// Offset is the first character to read, from 0 (the default).
	Offset int `json:"offset,omitempty"`
	// Limit is how many characters to read: 1 to SpillChars, SpillChars
	// when absent.
	Limit int `json:"limit,omitempty"`
}

var readOutputSchema = json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
	`"ref":{"type":"string","pattern":"^sha256:[0-9a-f]{64}$","description":"The ref of a stored output, as given where the output was cut: sha256: and 64 hex digits."},`+
	`"offset":{"type":"integer","minimum":0,"description":"The first character to read, counting from 0. Default 0."},`+
	`"limit":{"type":"integer","minimum":1,"maximum":%d,"description":"How many characters to read, at most %d. Default %d."}},`+
	`"required":["ref"],"additionalProperties":false}`, SpillChars, SpillChars, SpillChars))

// ReadOutput returns the read_output tool, which pages through outputs
// stored in b by the registry's spill (see Registry.SetSpill): it returns
// the characters [offset, offset+limit) of the output stored under ref,
// and a note saying where the next page starts. A ref that is malformed
// or names nothing stored, and an offset past the end, give error results
// that say so. It declares NoAccess. Run by a Registry, its pages are at
// most the registry's spill limit long (limit is lowered to it) and are
// never spilled again.
func ReadOutput(b Blobs) vocab.Tool {
	spec := vocab.ToolSpec{
		Name:        ReadOutputName,
		Description: "Read part of a tool output that was too long to show whole and was stored under a ref. Offset and limit count characters.",
		Schema:      readOutputSchema,
		NoAccess:    true,
	}
	return readOutputTool{MustTyped(spec, func(ctx context.Context, a ReadOutputArgs) (vocab.ToolResult, error) {
		return readOutput(ctx, b, a)
	})}
}

// readOutputTool is read_output: exempt from spilling.
type readOutputTool struct{ vocab.Tool }

func (readOutputTool) spillExempt() {}

// readOutput serves one read_output call.
func readOutput(ctx context.Context, b Blobs, a ReadOutputArgs) (vocab.ToolResult, error) {
	if b == nil {
		return BadArguments(ReadOutputName, "no outputs are stored in this session"), nil
	}
	limit := a.Limit
	if limit == 0 {
		limit = SpillChars
	}
	if l := spillLimitFrom(ctx); l > 0 && limit > l {
		limit = l // pages fit the history as any result must
	}
	data, err := b.Get(ctx, a.Ref)
	switch {
	case errors.Is(err, ErrBadRef):
		return BadArguments(ReadOutputName, fmt.Sprintf("field \"ref\": %q is not a ref of a stored output (sha256: and 64 lowercase hex digits)", a.Ref)), nil
	case errors.Is(err, ErrBlobNotFound):
		return BadArguments(ReadOutputName, fmt.Sprintf("field \"ref\": no output is stored under %s", a.Ref)), nil
	case err != nil:
		return vocab.ToolResult{}, err
	}
	text := string(data)
	total := utf8.RuneCountInString(text)
	if a.Offset > total || (a.Offset == total && total > 0) {
		return BadArguments(ReadOutputName, fmt.Sprintf("field \"offset\": %d is past the end of the output, which has %d characters (offsets 0 to %d)", a.Offset, total, total-1)), nil
	}
	start, _ := runeOffset(text, a.Offset)
	n, _ := runeOffset(text[start:], limit)
	page := text[start : start+n]
	end := a.Offset + utf8.RuneCountInString(page)
	res := vocab.ToolResult{Content: page}
	if end < total {
		res.Note = fmt.Sprintf("[%d characters from offset %d of the %d of %s; %d more: call %s with {\"ref\": %q, \"offset\": %d} to read on.]",
			end-a.Offset, a.Offset, total, a.Ref, total-end, ReadOutputName, a.Ref, end)
	} else {
		res.Note = fmt.Sprintf("[%d characters from offset %d of the %d of %s: the end of the output.]", end-a.Offset, a.Offset, total, a.Ref)
	}
	return res, nil
}
