// Package chart is a machine with a few forbidden imports.
package chart

import (
	"errors"
	"math/rand"   // want `rule "machines-pure": package github.com/loopchart/loopchart/machines/chart must not import "math/rand"`
	"sync"        // want `rule "machines-pure": .* must not import "sync"`
	"sync/atomic" // want `rule "machines-pure": .* must not import "sync/atomic"`
	"unsafe"      // want `rule "machines-pure": .* must not import "unsafe"`

	"github.com/acme/widget" // want `rule "machines-pure": .* must not import "github.com/acme/widget"`
	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/lib/strutil" // want `rule "machines-pure": .* must not import "github.com/loopchart/loopchart/lib/strutil"`
)

// ErrStuck is returned when no transition applies.
var ErrStuck = errors.New("stuck")

// New returns a new chart machine.
func New() *stateless.StateMachine { return stateless.NewStateMachine("idle") }

var (
	_ = rand.Int
	_ sync.Mutex
	_ atomic.Int64
	_ = unsafe.Sizeof(0)
	_ = widget.Name
	_ = strutil.Up
)
