package openai

import (
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// EnvAPIKey is the environment variable New reads OpenAI's API key from
// when Options.APIKey is empty and the base URL is OpenAI's API.
const EnvAPIKey = "OPENAI_API_KEY"

// DefaultBaseURL is OpenAI's API, the base URL when Options.BaseURL is
// empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a Provider. Model is required; everything else has a
// default.
type Options struct {
	// BaseURL is the API's base URL, the path before /chat/completions;
	// DefaultBaseURL when empty.
	BaseURL string
	// APIKey is sent as a bearer token. When empty and the base URL is
	// a hosted API of the behaviour table, it is read from that row's
	// variable (EnvAPIKey for OpenAI, DEEPSEEK_API_KEY, MOONSHOT_API_KEY,
	// MISTRAL_API_KEY; see ServerRow.KeyEnv), and a missing one is an
	// error; any other base URL (a local server, a proxy) gets no key
	// from the environment, so set it here if the server needs one.
	APIKey string
	// Model is the model to ask; vocab.Request.Model overrides it when
	// it is not empty.
	Model string
	// MaxTokens limits a reply's output tokens; 0 sends no limit (a
	// request's MaxTokens > 0 overrides it); negative is an error.
	MaxTokens int
	// Temperature is sent when not nil; it must lie in [0, 2].
	Temperature *float64
	// Headers are extra request headers.
	Headers http.Header
	// Server names the row of the behaviour table (see [Servers]):
	// "openai", "deepseek", "moonshot", "vllm", "ollama", "llamacpp" or
	// "mistral". Empty means a guess from the base URL's host
	// (api.deepseek.com → deepseek, api.moonshot.ai or .cn → moonshot,
	// api.mistral.ai → mistral, port 11434 → ollama, else openai).
	Server string
	// FlattenSchemas rewrites every tool's JSON Schema with
	// tools.FlattenSchema before it is sent: local $refs inlined, type
	// arrays turned into anyOf. For servers whose constrained decoding
	// or strict mode rejects references; a schema it cannot flatten (a
	// recursive $ref) fails the request with input.bad.
	FlattenSchemas bool
	// HTTPClient makes the requests; http.DefaultClient when nil. Its
	// Timeout, if any, bounds the whole reply, streaming included; the
	// session's stream watchdog is the better guard.
	HTTPClient *http.Client
}

// Provider streams chat completions from an OpenAI-compatible server. It
// implements vocab.Provider and is safe for concurrent use.
type Provider struct {
	svc     sdk.ChatCompletionService
	row     *ServerRow
	name    string
	model   string
	max     int
	temp    *float64
	secrets []string
	flatten bool
}

var _ vocab.Provider = (*Provider)(nil)

// New checks o and returns a Provider. Its errors are *vocab.Error values
// with code vocab.CodeBadInput, except a missing API key for a hosted API
// (no Options.APIKey and nothing in the row's KeyEnv), which has code
// vocab.CodeAuth and names the variable to set.
//
// The SDK client is built from o alone: nothing is read from the
// environment but the hosted API's key (no OPENAI_BASE_URL, OPENAI_ORG_ID,
// OPENAI_PROJECT_ID or OPENAI_CUSTOM_HEADERS), and the SDK never retries:
// the turn machine owns retries.
func New(o Options) (*Provider, error) {
	if strings.TrimSpace(o.Model) == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "openai: no model: set Options.Model")
	}
	if o.MaxTokens < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "openai: negative MaxTokens %d", o.MaxTokens)
	}
	if t := o.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return nil, vocab.Errorf(vocab.CodeBadInput, "openai: temperature %v outside [0, 2]", *t)
	}
	base := o.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "openai: base URL %q is not an http(s) URL", wire.SafeURL(base))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "openai: base URL %q may not carry user information, a query or a fragment", wire.SafeURL(base))
	}
	var row *ServerRow
	if o.Server == "" {
		row = guessServer(u)
	} else if row, _ = serverRow(o.Server); row == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "openai: unknown server %q (want one of %s)", o.Server, serverNames())
	}
	key := o.APIKey
	if key == "" && row.hosted(u) {
		// Only for the row's own API: a key in the environment never
		// goes to another server.
		key = os.Getenv(row.KeyEnv)
		if key == "" {
			return nil, &vocab.Error{Code: vocab.CodeAuth, Message: "openai: no API key for " + u.Host + ": set " + row.KeyEnv + " or Options.APIKey"}
		}
	}
	for k := range o.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") {
			return nil, vocab.Errorf(vocab.CodeBadInput, "openai: bad header name %q", k)
		}
	}
	client := o.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithMaxRetries(0),
		option.WithHTTPClient(client),
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	p := &Provider{row: row, name: "openai/" + row.Name, model: o.Model, max: o.MaxTokens, secrets: []string{key}, flatten: o.FlattenSchemas}
	for k, vs := range o.Headers {
		for i, v := range vs {
			if i == 0 {
				opts = append(opts, option.WithHeader(k, v))
			} else {
				opts = append(opts, option.WithHeaderAdd(k, v))
			}
			if secretHeader(k) {
				p.secrets = append(p.secrets, v)
			}
		}
	}
	if o.Temperature != nil {
		t := *o.Temperature
		p.temp = &t
	}
	p.svc = sdk.NewChatCompletionService(opts...)
	return p, nil
}

// Name returns the provider's name, "openai/" and the server row's name
// ("openai/openai", "openai/deepseek"…): the Provider of the thinking
// parts it writes.
func (p *Provider) Name() string { return p.name }

// secretHeader reports whether a header probably carries a credential, so
// that its value is redacted from error messages.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"auth", "key", "token", "secret", "cookie"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}
