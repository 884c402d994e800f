// Package ids is a vocab subpackage; it may use the rest of vocab.
package ids

import "github.com/loopchart/loopchart/vocab"

// Start is the first event.
const Start vocab.Event = "start"
