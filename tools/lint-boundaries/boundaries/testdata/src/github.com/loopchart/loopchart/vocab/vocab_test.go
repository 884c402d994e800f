package vocab_test

import (
	"testing"

	"github.com/loopchart/loopchart/lib/strutil" // want `rule "vocab-leaf": package github.com/loopchart/loopchart/vocab_test must not import "github.com/loopchart/loopchart/lib/strutil"`
	"github.com/loopchart/loopchart/vocab"
)

func TestEvent(t *testing.T) {
	_ = vocab.Event(strutil.Up("x"))
}
