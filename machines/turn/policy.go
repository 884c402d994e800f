package turn

import (
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Retry policy defaults (seed-semantics §2.9).
const (
	DefaultMaxAttempts = 10
	DefaultBaseDelay   = 500 * time.Millisecond
	DefaultMaxDelay    = 32 * time.Second
	DefaultJitter      = 0.25
	DefaultAbortGrace  = 2500 * time.Millisecond
)

// RetryPolicy decides whether a failed model request is tried again and
// after how long.
type RetryPolicy struct {
	// MaxAttempts counts attempts per step, the first included (minimum 1).
	MaxAttempts int `json:"maxAttempts"`
	// BaseDelay doubles per failed attempt up to MaxDelay.
	BaseDelay time.Duration `json:"baseDelay"`
	MaxDelay  time.Duration `json:"maxDelay"`
	// Jitter is the largest extra fraction added to a delay (0.25: +0–25 %).
	Jitter float64 `json:"jitter"`
	// Infinite retries every retryable failure regardless of MaxAttempts.
	Infinite bool `json:"infinite,omitempty"`
}

// DefaultRetryPolicy returns the seed policy: 10 attempts, 500 ms doubling
// to 32 s, +0–25 % jitter.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: DefaultMaxAttempts, BaseDelay: DefaultBaseDelay, MaxDelay: DefaultMaxDelay, Jitter: DefaultJitter}
}

// Retryable reports whether err is of a retryable kind: a provider error
// marked retryable, or an empty response (unless the provider filtered it).
func Retryable(err *vocab.Error) bool {
	if err == nil {
		return false
	}
	return err.Retryable || err.Code == vocab.CodeEmptyResponse
}

// ShouldRetry reports whether a request that failed on attempt (1-based)
// with err may be tried again.
func (p RetryPolicy) ShouldRetry(attempt int, err *vocab.Error) bool {
	if !Retryable(err) {
		return false
	}
	return p.Infinite || attempt < max(p.MaxAttempts, 1)
}

// Delay returns the wait before retrying after failed attempt n (1-based).
// A provider Retry-After wins; otherwise BaseDelay·2^(n-1) capped at
// MaxDelay, plus jitter·Jitter of that delay, where jitter in [0, 1) is
// drawn by the caller.
func (p RetryPolicy) Delay(n int, jitter float64, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	jitter = min(max(jitter, 0), 1)
	return d + time.Duration(float64(d)*p.Jitter*jitter)
}
