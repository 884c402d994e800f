package anthropic

import (
	"context"
	"iter"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// EnvAPIKey is the environment variable New reads the API key from when
// Options.APIKey is empty and the base URL is DefaultBaseURL (a key in the
// environment never goes to another server).
const EnvAPIKey = "ANTHROPIC_API_KEY"

// DefaultBaseURL is the Anthropic API's address, used when Options.BaseURL
// is empty.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is the output token limit of a request when neither
// Options.MaxTokens nor vocab.Request.MaxTokens sets one (the Messages API
// requires a limit).
const DefaultMaxTokens = 8192

// providerName names the adapter in stream parts ("anthropic" thinking)
// and in error messages.
const providerName = "anthropic"

// minThinkingBudget is the smallest extended-thinking budget the API takes.
const minThinkingBudget = 1024

// Options configure a [Provider]. Only Model is required.
type Options struct {
	// BaseURL is the API's address; "" means DefaultBaseURL. It must be an
	// http or https URL with a host.
	BaseURL string
	// APIKey authenticates the requests. "" means the value of the
	// environment variable EnvAPIKey for DefaultBaseURL, which needs a
	// key; a custom BaseURL (a proxy, a test server) gets no key from the
	// environment: set it here if the server needs one.
	APIKey string
	// Model names the model; vocab.Request.Model overrides it when set.
	Model string
	// MaxTokens limits each reply's output tokens: 0 means
	// DefaultMaxTokens, negative is an error. vocab.Request.MaxTokens
	// overrides it when positive.
	MaxTokens int
	// Temperature is sent when set; it must lie in [0, 1]. With extended
	// thinking the API takes only 1.
	Temperature *float64
	// ThinkingBudget turns extended thinking on with this many tokens of
	// budget: 0 means off; otherwise it must be at least 1024 and below
	// the max tokens of every request.
	ThinkingBudget int
	// Headers are extra request headers, sent after the SDK's own (so they
	// may replace them).
	Headers http.Header
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Provider streams replies from the Anthropic Messages API. It implements
// vocab.Provider and is safe for concurrent use.
type Provider struct {
	client      sdk.Client
	model       string
	maxTokens   int
	temperature *float64
	budget      int
	apiKey      string // for redaction only
}

var _ vocab.Provider = (*Provider)(nil)

// New checks o and returns a Provider. Its errors are *vocab.Error values
// with code vocab.CodeBadInput, except a missing API key for
// DefaultBaseURL, which is vocab.CodeAuth.
//
// The SDK client New builds takes nothing from the environment (no base
// URL, token, profile or custom headers; the key is read from EnvAPIKey
// by New itself), never retries (the turn machine owns retries) and
// records no OpenTelemetry spans (so it sends no trace-context headers).
func New(o Options) (*Provider, error) {
	if strings.TrimSpace(o.Model) == "" {
		return nil, badInput("a model is required")
	}
	if o.MaxTokens < 0 {
		return nil, badInput("max tokens %d is negative", o.MaxTokens)
	}
	maxTokens := o.MaxTokens
	if maxTokens == 0 {
		maxTokens = DefaultMaxTokens
	}
	var temperature *float64
	if o.Temperature != nil {
		t := *o.Temperature
		if math.IsNaN(t) || t < 0 || t > 1 {
			return nil, badInput("temperature %v is outside [0, 1]", t)
		}
		temperature = &t
	}
	switch {
	case o.ThinkingBudget < 0:
		return nil, badInput("thinking budget %d is negative", o.ThinkingBudget)
	case o.ThinkingBudget > 0 && o.ThinkingBudget < minThinkingBudget:
		return nil, badInput("thinking budget %d is below the minimum of %d", o.ThinkingBudget, minThinkingBudget)
	case o.ThinkingBudget > 0 && o.ThinkingBudget >= maxTokens:
		return nil, badInput("thinking budget %d must be below max tokens %d", o.ThinkingBudget, maxTokens)
	case o.ThinkingBudget > 0 && temperature != nil && *temperature != 1:
		return nil, badInput("temperature %v: with extended thinking the API takes only 1", *temperature)
	}
	base, err := baseURL(o.BaseURL)
	if err != nil {
		return nil, err
	}
	for k, vs := range o.Headers {
		if !validHeader(k, vs) {
			return nil, badInput("header %q is not a valid header", k)
		}
	}
	key := o.APIKey
	if key == "" && base == DefaultBaseURL {
		// Only for Anthropic's own API: a key in the environment never
		// goes to another server.
		key = os.Getenv(EnvAPIKey)
	}
	if key == "" && base == DefaultBaseURL {
		return nil, &vocab.Error{Code: vocab.CodeAuth, Message: "anthropic: no API key: set " + EnvAPIKey + " or Options.APIKey"}
	}
	client := o.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithHTTPClient(client),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
		option.WithOpenTelemetryPropagation(false),
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	for k, vs := range o.Headers {
		for i, v := range vs {
			if i == 0 {
				opts = append(opts, option.WithHeader(k, v))
			} else {
				opts = append(opts, option.WithHeaderAdd(k, v))
			}
		}
	}
	return &Provider{
		client:      sdk.NewClient(opts...),
		model:       o.Model,
		maxTokens:   maxTokens,
		temperature: temperature,
		budget:      o.ThinkingBudget,
		apiKey:      key,
	}, nil
}

// Name returns "anthropic".
func (p *Provider) Name() string { return providerName }

// Stream sends req to the Messages API and yields the reply as it
// streams: text and thinking deltas as they arrive, each thinking block's
// closing part (with its signature, or its redacted data), each tool call
// whole when its block ends, usage when the reply starts and again when it
// ends, then one finish part. A failure yields one *vocab.Error and ends
// the stream. Breaking out of the loop closes the response.
func (p *Provider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		params, opts, err := p.params(req)
		if err != nil {
			yield(vocab.StreamPart{}, err)
			return
		}
		if ctx.Err() != nil {
			yield(vocab.StreamPart{}, p.cancelled(ctx))
			return
		}
		// The SDK sends the request and classifies a failed one; the
		// events are read here, from the raw response, so that each costs
		// one small decode instead of the SDK's typed union.
		var resp *http.Response
		opts = append(opts, option.WithResponseInto(&resp))
		stream := p.client.Messages.NewStreaming(ctx, params, opts...)
		defer stream.Close() // closes the response body
		if err := stream.Err(); err != nil {
			yield(vocab.StreamPart{}, p.failure(ctx, err))
			return
		}
		if resp == nil || resp.Body == nil {
			yield(vocab.StreamPart{}, &vocab.Error{Code: vocab.CodeTransport, Retryable: true, Message: providerName + ": no response"})
			return
		}
		p.play(ctx, resp, yield)
	}
}

// baseURL checks and normalises the base URL ("" means DefaultBaseURL).
func baseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", badInput("base URL %q is not an http or https URL", wire.SafeURL(raw))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", badInput("base URL %q may not carry user information, a query or a fragment", wire.SafeURL(raw))
	}
	return strings.TrimRight(raw, "/"), nil
}

// validHeader reports whether k and its values can go on the wire.
func validHeader(k string, vs []string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	for _, v := range vs {
		if strings.ContainsAny(v, "\r\n\x00") {
			return false
		}
	}
	return true
}
