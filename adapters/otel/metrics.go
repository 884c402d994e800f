package otelchart

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
)

// Metric names of loopchart's own instruments (the GenAI ones are
// genaiconv's: gen_ai.client.operation.duration, gen_ai.client.token.usage).
const (
	// MetricSteps counts the steps that ended, by outcome (finish reason).
	MetricSteps = "loopchart.steps"
	// MetricStepDuration is the histogram of step durations, in seconds.
	MetricStepDuration = "loopchart.step.duration"
	// MetricToolCalls counts the tool calls that ended, by tool and outcome.
	MetricToolCalls = "loopchart.tool.calls"
	// MetricToolDuration is the histogram of tool execution times, in seconds.
	MetricToolDuration = "loopchart.tool.duration"
	// MetricRetries counts the model requests retried, by error code.
	MetricRetries = "loopchart.retries"
)

// Bucket boundaries the GenAI conventions advise.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// instruments are the observer's metric instruments.
type instruments struct {
	opDuration genaiconv.ClientOperationDuration
	tokens     genaiconv.ClientTokenUsage
	steps      metric.Int64Counter
	stepDur    metric.Float64Histogram
	toolCalls  metric.Int64Counter
	toolDur    metric.Float64Histogram
	retries    metric.Int64Counter
}

func newInstruments(m metric.Meter) (*instruments, error) {
	var in instruments
	var err, e error
	in.opDuration, e = genaiconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	in.tokens, e = genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(tokenBuckets...))
	err = errors.Join(err, e)
	in.steps, e = m.Int64Counter(MetricSteps, metric.WithUnit("{step}"),
		metric.WithDescription("Steps (one model reply and the tool calls it asked for) that ended, by outcome (the finish reason)."))
	err = errors.Join(err, e)
	in.stepDur, e = m.Float64Histogram(MetricStepDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a step, from its step/start to its step/end."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	in.toolCalls, e = m.Int64Counter(MetricToolCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls that ended, by tool and outcome (ok or error)."))
	err = errors.Join(err, e)
	in.toolDur, e = m.Float64Histogram(MetricToolDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a tool call's execution (0 for a call that never ran)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	in.retries, e = m.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Model requests retried, by the error code that caused the retry."))
	err = errors.Join(err, e)
	return &in, err
}

// Attribute keys of loopchart's own span and metric attributes.
const (
	keyOutcome       = attribute.Key("loopchart.outcome")
	keyPrompt        = attribute.Key("loopchart.prompt.id")
	keyTurn          = attribute.Key("loopchart.turn")
	keyStep          = attribute.Key("loopchart.step")
	keySteps         = attribute.Key("loopchart.turn.steps")
	keyAttempt       = attribute.Key("loopchart.attempt")
	keyAttempts      = attribute.Key("loopchart.step.attempts")
	keyCause         = attribute.Key("loopchart.cancel.cause")
	keyApproval      = attribute.Key("loopchart.tool.approval")
	keyEventsDropped = attribute.Key("loopchart.span.events_dropped")
	keyNextAttempt   = attribute.Key("loopchart.retry.next_attempt")
	keyMaxAttempts   = attribute.Key("loopchart.retry.max_attempts")
	keyDelay         = attribute.Key("loopchart.retry.delay")
	keyMessage       = attribute.Key("loopchart.message")
	keyDetector      = attribute.Key("loopchart.loop.detector")
	keyLevel         = attribute.Key("loopchart.loop.level")
	keyCount         = attribute.Key("loopchart.loop.count")
	keyTerminate     = attribute.Key("loopchart.loop.terminate")
	keyHook          = attribute.Key("loopchart.hook")
	keyBy            = attribute.Key("loopchart.history.by")
	keyMachine       = attribute.Key("loopchart.machine")
	keyInstance      = attribute.Key("loopchart.instance")
	keyFrom          = attribute.Key("loopchart.from")
	keyTo            = attribute.Key("loopchart.to")
	keyTrigger       = attribute.Key("loopchart.trigger")
	keyGuard         = attribute.Key("loopchart.guard")
)

// Operation names.
const (
	opChatName   = "chat"
	opInvokeName = "invoke_agent"
)

// Constant attributes, made once.
var (
	opInvoke   = semconv.GenAIOperationNameInvokeAgent
	opChat     = semconv.GenAIOperationNameChat
	opTool     = semconv.GenAIOperationNameExecuteTool
	toolTypeFn = semconv.GenAIToolType("function")
)

// metricAttrs are the bounded attributes of one measurement: the
// operation's model and provider, a tool name, an error type, an outcome.
type metricAttrs struct {
	provider, model, response, tool, errType, outcome string
}

// optKey keys the cache of measurement options: the GenAI instruments'
// attributes start with the operation and the token type.
type optKey struct {
	a             metricAttrs
	op, tokenType string
}

// options returns the measurement option for a, cached: a session uses a
// handful of combinations, and building an attribute set sorts and
// allocates.
func (o *Observer) options(a metricAttrs) metric.MeasurementOption {
	key := optKey{a: a}
	if opt, ok := o.optCache[key]; ok {
		return opt
	}
	kv := make([]attribute.KeyValue, 0, 6)
	if a.provider != "" {
		kv = append(kv, semconv.GenAIProviderNameKey.String(a.provider))
	}
	if a.model != "" {
		kv = append(kv, semconv.GenAIRequestModel(a.model))
	}
	if a.response != "" {
		kv = append(kv, semconv.GenAIResponseModel(a.response))
	}
	if a.tool != "" {
		kv = append(kv, semconv.GenAIToolName(a.tool))
	}
	if a.errType != "" {
		kv = append(kv, semconv.ErrorTypeKey.String(a.errType))
	}
	if a.outcome != "" {
		kv = append(kv, keyOutcome.String(a.outcome))
	}
	return o.cache(key, kv)
}

// cache keeps the option for kv under key, while the cache is small.
func (o *Observer) cache(key optKey, kv []attribute.KeyValue) metric.MeasurementOption {
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	if len(o.optCache) < 1024 { // bounded, whatever the values
		o.optCache[key] = opt
	}
	return opt
}

// genAIOptions is options for the GenAI instruments: operation, provider
// and (for token usage) the token type come first.
func (o *Observer) genAIOptions(op, tokenType string, a metricAttrs) metric.MeasurementOption {
	key := optKey{a: a, op: op, tokenType: tokenType}
	if opt, ok := o.optCache[key]; ok {
		return opt
	}
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv, semconv.GenAIOperationNameKey.String(op), semconv.GenAIProviderNameKey.String(a.provider))
	if tokenType != "" {
		kv = append(kv, semconv.GenAITokenTypeKey.String(tokenType))
	}
	if a.model != "" {
		kv = append(kv, semconv.GenAIRequestModel(a.model))
	}
	if a.response != "" {
		kv = append(kv, semconv.GenAIResponseModel(a.response))
	}
	if a.errType != "" {
		kv = append(kv, semconv.ErrorTypeKey.String(a.errType))
	}
	return o.cache(key, kv)
}

// bg is the context measurements are recorded with: the observer's
// measurements belong to no request.
var bg = context.Background()
