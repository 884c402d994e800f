package inspect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"html/template"
	"regexp"
	"strconv"
	"sync"

	"github.com/goccy/go-graphviz"
)

// renderer draws definitions as SVG with Graphviz (compiled to
// WebAssembly, run in process). Each definition is drawn once, at its
// first use; the Graphviz instance is made at the first drawing and used
// by one drawing at a time.
type renderer struct {
	defs    []*compiled
	entries []svgEntry

	// mu serialises the use of gv.
	mu     sync.Mutex
	gv     *graphviz.Graphviz
	closed bool
	// renders counts the drawings made, for tests.
	renders int
}

// svgEntry is one definition's drawing.
type svgEntry struct {
	once sync.Once
	svg  template.HTML
	err  error
}

func newRenderer(defs []*compiled) *renderer {
	return &renderer{defs: defs, entries: make([]svgEntry, len(defs))}
}

// errClosed is the error of a drawing asked for after Close.
var errClosed = errors.New("inspect: the handler is closed")

// svg returns the drawing of definition i, ready to be inlined in HTML.
func (r *renderer) svg(i int) (template.HTML, error) {
	e := &r.entries[i]
	e.once.Do(func() {
		var raw []byte
		raw, e.err = r.render(r.defs[i].DOT())
		if e.err == nil {
			e.svg = template.HTML(annotate(raw, r.defs[i]))
		} else {
			e.err = fmt.Errorf("inspect: draw the %s machine (v%d): %w", r.defs[i].Machine, r.defs[i].Version, e.err)
		}
	})
	return e.svg, e.err
}

// render lays dot out and renders it as SVG.
func (r *renderer) render(dot string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errClosed
	}
	// The Graphviz calls take no deadline that matters here: the layout of
	// a machine of a few dozen states takes milliseconds.
	ctx := context.Background()
	r.renders++
	if r.gv == nil {
		gv, err := graphviz.New(ctx)
		if err != nil {
			return nil, err
		}
		r.gv = gv
	}
	g, err := graphviz.ParseBytes([]byte(dot))
	if err != nil {
		return nil, err
	}
	defer g.Close()
	var buf bytes.Buffer
	if err := r.gv.Render(ctx, g, graphviz.SVG, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// close releases the Graphviz instance; later drawings fail.
func (r *renderer) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.gv == nil {
		return nil
	}
	err := r.gv.Close()
	r.gv = nil
	return err
}

var (
	// groupOpen matches the opening tag of a Graphviz SVG group with its
	// id and class.
	groupOpen = regexp.MustCompile(`<g id="([^"]*)" class="([^"]*)">`)
	// styleAttr matches inline style attributes, which the page's
	// Content-Security-Policy would refuse.
	styleAttr = regexp.MustCompile(` style="[^"]*"`)
	// comment matches an XML comment and the line end after it.
	comment = regexp.MustCompile(`(?s)<!--.*?-->\n?`)
)

// annotate makes Graphviz's SVG document an element to inline in HTML:
// it drops the XML prolog and comments, and gives each state group a
// data-state attribute (its state's name) and each transition group a
// data-transition attribute (its index in the definition), beside the
// ids the DOT set.
func annotate(raw []byte, c *compiled) string {
	if i := bytes.Index(raw, []byte("<svg")); i >= 0 {
		raw = raw[i:]
	}
	raw = comment.ReplaceAll(raw, nil)
	raw = styleAttr.ReplaceAll(raw, nil)
	prefix := c.Machine + "-tr-"
	raw = groupOpen.ReplaceAllFunc(raw, func(tag []byte) []byte {
		m := groupOpen.FindSubmatch(tag)
		id := html.UnescapeString(string(m[1]))
		extra := ""
		if s, ok := c.idState[id]; ok {
			extra = ` data-machine="` + html.EscapeString(c.Machine) + `" data-state="` + html.EscapeString(s) + `"`
		} else if len(id) > len(prefix) && id[:len(prefix)] == prefix {
			if n, err := strconv.Atoi(id[len(prefix):]); err == nil && n >= 0 && n < len(c.Transitions) {
				extra = ` data-machine="` + html.EscapeString(c.Machine) + `" data-transition="` + strconv.Itoa(n) + `"`
			}
		}
		if extra == "" {
			return tag
		}
		return []byte(`<g id="` + string(m[1]) + `" class="` + string(m[2]) + `"` + extra + `>`)
	})
	return string(bytes.TrimSpace(raw))
}
