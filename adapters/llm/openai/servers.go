package openai

import (
	"net"
	"net/url"
	"slices"
	"strings"
)

// Token limit fields of a request.
const (
	// FieldMaxTokens is the classic "max_tokens" field.
	FieldMaxTokens = "max_tokens"
	// FieldMaxCompletionTokens is OpenAI's "max_completion_tokens", which
	// replaced max_tokens (its reasoning models refuse max_tokens).
	FieldMaxCompletionTokens = "max_completion_tokens"
)

// ServerRow is one row of the behaviour table: what one
// OpenAI-compatible server expects of a request and how it reports
// usage, cache hits and context overflow. [Servers] returns the table;
// [Options].Server names a row.
type ServerRow struct {
	// Name is the row's name, as Options.Server spells it; the
	// provider's name is "openai/" + Name.
	Name string
	// Hosts are base URL hosts (host or host:port) that select the row
	// when Options.Server is empty.
	Hosts []string
	// MaxTokensField is the request field of the output token limit:
	// FieldMaxTokens or FieldMaxCompletionTokens.
	MaxTokensField string
	// IncludeUsage: the request asks for usage with
	// stream_options.include_usage.
	IncludeUsage bool
	// EchoReasoning: the provider's own reasoning is sent back as
	// "reasoning_content" on assistant messages in tool turns (every
	// assistant message between two user messages when one of them
	// called a tool); an assistant message with tool calls whose
	// reasoning is not this provider's gets an empty reasoning_content,
	// which such servers demand. Other assistant messages carry no
	// reasoning.
	EchoReasoning bool
	// NoEchoModels are models of the row that reject reasoning_content
	// in their input (400): it is never sent to them.
	NoEchoModels []string
	// KeyEnv is the environment variable the API key is read from when
	// Options.APIKey is empty and the base URL is the row's hosted API
	// (one of Hosts): OPENAI_API_KEY for api.openai.com, DEEPSEEK_API_KEY,
	// MOONSHOT_API_KEY, MISTRAL_API_KEY. A key is never read from the
	// environment for any other host, so one provider's key never goes
	// to another server; pass Options.APIKey for those. Empty for local
	// servers.
	KeyEnv string
	// MistralIDs: tool call ids in requests take the form Mistral
	// demands (nine letters and digits, wire.MistralID).
	MistralIDs bool
	// Usage says where the server reports usage and cache hits (for
	// the documentation; the stream reader accepts every form).
	Usage string
	// Overflow are lower-case phrases of the server's context-overflow
	// error messages. A failure whose message holds one is a context
	// overflow, whatever its status.
	Overflow []string
}

// servers is the behaviour table. The package documentation quotes it.
//
//	row       max tokens field       include_usage  reasoning echoed back      ids      usage and cache hits
//	openai    max_completion_tokens  yes            never (hidden reasoning)   as is    usage chunk (choices: []); prompt_tokens_details.cached_tokens
//	deepseek  max_tokens             yes            tool turns; never for      as is    usage chunk; prompt_cache_hit_tokens (and cached_tokens)
//	                                                deepseek-reasoner (400)
//	moonshot  max_tokens             yes            tool turns (Kimi thinking  as is    usage inside the last chunk's choice; usage.cached_tokens
//	                                                400s without it)
//	vllm      max_tokens             yes            never                      as is    usage chunk; prompt_tokens_details.cached_tokens when enabled
//	ollama    max_tokens             yes            never                      as is    usage chunk; no cache report
//	llamacpp  max_tokens             yes            never                      as is    usage in the last chunk; prompt_tokens_details.cached_tokens
//	mistral   max_tokens             no (refused)   never                      9 alnum  usage in the last chunk
var servers = []ServerRow{
	{
		Name: "openai", Hosts: []string{"api.openai.com"}, KeyEnv: "OPENAI_API_KEY",
		MaxTokensField: FieldMaxCompletionTokens, IncludeUsage: true,
		Usage: "a last chunk with choices: [] and usage; cache hits in usage.prompt_tokens_details.cached_tokens (prompt_tokens includes them)",
		Overflow: []string{
			"maximum context length", // "This model's maximum context length is 128000 tokens. However, your messages resulted in …"
			"input tokens exceed the configured limit",
		},
	},
	{
		Name: "deepseek", Hosts: []string{"api.deepseek.com"}, KeyEnv: "DEEPSEEK_API_KEY",
		MaxTokensField: FieldMaxTokens, IncludeUsage: true,
		EchoReasoning: true, NoEchoModels: []string{"deepseek-reasoner"},
		Usage: "a last chunk with choices: [] and usage; cache hits in usage.prompt_cache_hit_tokens (prompt_tokens = hit + miss)",
		Overflow: []string{
			"maximum context length", // "This model's maximum context length is 131072 tokens. However, you requested … Please reduce the length of the messages or completion."
			"reduce the length of the messages",
		},
	},
	{
		Name: "moonshot", Hosts: []string{"api.moonshot.ai", "api.moonshot.cn"}, KeyEnv: "MOONSHOT_API_KEY",
		MaxTokensField: FieldMaxTokens, IncludeUsage: true,
		EchoReasoning: true,
		Usage:         "usage inside the choice of the last chunk (choices[0].usage); cache hits in usage.cached_tokens",
		Overflow: []string{
			"exceeded model token limit", // "Invalid request: Your request exceeded model token limit: 262144 (requested: 269030)"
			"model max length exceeded",  // "model max length exceeded, max length:8192"
		},
	},
	{
		Name:           "vllm",
		MaxTokensField: FieldMaxTokens, IncludeUsage: true,
		Usage: "a last chunk with choices: [] and usage; cache hits in usage.prompt_tokens_details.cached_tokens when the server enables them",
		Overflow: []string{
			"maximum context length",                  // "This model's maximum context length is 4096 tokens. However, you requested …"
			"longer than the maximum model length",    // "The decoder prompt (length 5000) is longer than the maximum model length of 4096."
			"reduce the length of the input messages", // newer wording of the first
		},
	},
	{
		Name: "ollama", Hosts: []string{"localhost:11434", "127.0.0.1:11434", "[::1]:11434"},
		MaxTokensField: FieldMaxTokens, IncludeUsage: true,
		Usage: "a last chunk with choices: [] and usage; no cache report",
		Overflow: []string{
			"exceeds maximum context length", // "input length exceeds maximum context length"
			"exceeds the context length",     // "the input length exceeds the context length"
		},
	},
	{
		Name:           "llamacpp",
		MaxTokensField: FieldMaxTokens, IncludeUsage: true,
		Usage: "usage (and timings) in the last chunk, beside its finish reason; cache hits in usage.prompt_tokens_details.cached_tokens",
		Overflow: []string{
			"exceeds the available context size", // 400 exceed_context_size_error: "the request exceeds the available context size, try increasing it"
		},
	},
	{
		Name: "mistral", Hosts: []string{"api.mistral.ai"}, KeyEnv: "MISTRAL_API_KEY",
		MaxTokensField: FieldMaxTokens, MistralIDs: true,
		Usage: "usage in the last chunk, beside its finish reason (unknown request fields are refused: no stream_options)",
		Overflow: []string{
			"maximum context length", // "Prompt contains 40000 tokens … too large for model with 32768 maximum context length"
		},
	},
}

// Servers returns a copy of the behaviour table, one row per server
// Options.Server accepts, in the order of the table.
func Servers() []ServerRow {
	out := make([]ServerRow, len(servers))
	for i, r := range servers {
		r.Hosts = slices.Clone(r.Hosts)
		r.NoEchoModels = slices.Clone(r.NoEchoModels)
		r.Overflow = slices.Clone(r.Overflow)
		out[i] = r
	}
	return out
}

// serverRow returns the row named name.
func serverRow(name string) (*ServerRow, bool) {
	for i := range servers {
		if servers[i].Name == name {
			return &servers[i], true
		}
	}
	return nil, false
}

// guessServer picks the row of a base URL by its host; "openai" when no
// row claims it.
// hosted reports whether u is the row's hosted API: its host is one of
// the row's Hosts and the row names a key variable.
func (r *ServerRow) hosted(u *url.URL) bool {
	return r.KeyEnv != "" && r.hasHost(u)
}

func (r *ServerRow) hasHost(u *url.URL) bool {
	host := strings.ToLower(u.Host)
	for _, h := range r.Hosts {
		if h == host || h == strings.TrimSuffix(host, ":443") && u.Scheme == "https" {
			return true
		}
	}
	return false
}

func guessServer(u *url.URL) *ServerRow {
	host := strings.ToLower(u.Host)
	_, port, _ := net.SplitHostPort(host)
	for i := range servers {
		for _, h := range servers[i].Hosts {
			if h == host || h == strings.TrimSuffix(host, ":443") && u.Scheme == "https" {
				return &servers[i]
			}
		}
	}
	if port == "11434" { // Ollama's port, whatever the host is called
		r, _ := serverRow("ollama")
		return r
	}
	r, _ := serverRow("openai")
	return r
}

// echoes reports whether reasoning goes back to model.
func (r *ServerRow) echoes(model string) bool {
	return r.EchoReasoning && !slices.Contains(r.NoEchoModels, model)
}

// overflow reports whether a lower-cased message is one of the row's
// context-overflow messages.
func (r *ServerRow) overflow(lower string) bool {
	for _, s := range r.Overflow {
		if strings.Contains(lower, s) {
			return true
		}
	}
	return false
}

// serverNames lists the rows' names, for error messages.
func serverNames() string {
	names := make([]string, len(servers))
	for i, r := range servers {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}
