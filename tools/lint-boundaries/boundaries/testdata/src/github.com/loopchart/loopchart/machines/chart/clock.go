package chart

import . "time" // a dot import of time is still resolved to package time

// Pause waits; the dot-imported Sleep is still time.Sleep.
func Pause() {
	Sleep(Second) // want `rule "machines-no-clock": package github.com/loopchart/loopchart/machines/chart must not use time.Sleep`
}

// Timeout is fine: durations are pure values.
const Timeout = 3 * Second
