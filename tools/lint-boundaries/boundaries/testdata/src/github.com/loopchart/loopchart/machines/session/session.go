// Package session is a machine that ranges over maps and slices.
package session

import (
	"maps"
	m2 "maps"
	"slices"
	"sort"
)

// Inbox maps ids to messages.
type Inbox map[string]string

// Core holds a map in a field.
type Core struct {
	byID  map[string]int
	inbox Inbox
	order []string
}

func (c *Core) lookup() map[string]int { return c.byID }

// Step ranges in every way the rule cares about.
func (c *Core) Step(counts map[string]int) []string {
	var out []string
	for k := range counts { // want `^boundaries: rule "machines-no-map-range": package github\.com/loopchart/loopchart/machines/session must not range over a map \(map\[string\]int\) \(map iteration order is random and machines must be deterministic; range over a slice, e\.g\. slices\.Sorted\(maps\.Keys\(m\)\)\)$`
		out = append(out, k)
	}
	for k, v := range c.byID { // want `rule "machines-no-map-range": .* must not range over a map \(map\[string\]int\)`
		_, _ = k, v
	}
	for range c.lookup() { // want `must not range over a map \(map\[string\]int\)`
	}
	for id := range c.inbox { // want `must not range over a map \(Inbox\)`
		out = append(out, id)
	}
	for _, v := range map[int]bool{1: true} { // want `must not range over a map \(map\[int\]bool\)`
		_ = v
	}
	for k := range maps.Keys(counts) { // want `must not range over maps\.Keys \(it yields in map order\)`
		out = append(out, k)
	}
	for k, v := range m2.All(counts) { // want `must not range over maps\.All`
		_, _ = k, v
	}
	for v := range maps.Values(counts) { // want `must not range over maps\.Values`
		_ = v
	}

	// Slices, arrays, strings, integers, channels and sorted keys are fine.
	for _, id := range c.order {
		out = append(out, id)
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, k)
	}
	keys := make([]string, 0, len(c.byID))
	for _, k := range keys {
		out = append(out, k)
	}
	sort.Strings(keys)
	for i := range 3 {
		_ = i
	}
	for i, r := range "abc" {
		_, _ = i, r
	}
	for i := range [2]int{} {
		_ = i
	}
	for range slices.Values(c.order) {
	}
	var ch chan int
	for range ch {
	}
	// A map used without ranging over it is fine.
	_ = counts["x"]
	_ = len(c.byID)
	clear(c.byID)
	return out
}

// Sum ranges over a type parameter whose type set is a map.
func Sum[M ~map[K]int, K comparable](m M) int {
	n := 0
	for _, v := range m { // want `must not range over a map \(M\)`
		n += v
	}
	return n
}

// Mapish is a constraint with a map in its type set.
type Mapish interface {
	~map[string]int
}

// Count ranges over a type parameter constrained by a named interface.
func Count[M Mapish](m M) int {
	n := 0
	for range m { // want `must not range over a map \(M\)`
		n++
	}
	return n
}

// Total ranges over a type parameter whose type set holds only slices.
func Total[S ~[]int](s S) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}
