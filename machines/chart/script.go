package chart

import (
	"fmt"
	"strconv"
	"strings"
)

// Args are the key=value arguments of one line of a transition table. A
// bare word is a key with value "true". Values may be Go-quoted strings.
type Args map[string]string

// ParseLine splits a table line "trigger key=value flag key=\"quoted value\""
// into its first word and its arguments.
func ParseLine(line string) (string, Args, error) {
	var words []string
	rest := strings.TrimSpace(line)
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] != ' ' {
			if rest[i] == '"' {
				q, err := strconv.QuotedPrefix(rest[i:])
				if err != nil {
					return "", nil, fmt.Errorf("line %q: %v", line, err)
				}
				i += len(q)
				continue
			}
			i++
		}
		words = append(words, rest[:i])
		rest = strings.TrimSpace(rest[i:])
	}
	if len(words) == 0 {
		return "", nil, fmt.Errorf("empty line")
	}
	args := Args{}
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			args[k] = "true"
			continue
		}
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			if err != nil {
				return "", nil, fmt.Errorf("line %q: %s: %v", line, k, err)
			}
			v = u
		}
		args[k] = v
	}
	return words[0], args, nil
}

// Int returns the integer value of key, or def when absent.
func (a Args) Int(key string, def int) (int, error) {
	v, ok := a[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not an integer", key, v)
	}
	return n, nil
}

// Bool reports whether key is present and not "false".
func (a Args) Bool(key string) bool {
	v, ok := a[key]
	return ok && v != "false"
}

// List splits a comma-separated value; an absent key gives nil.
func (a Args) List(key string) []string {
	v, ok := a[key]
	if !ok || v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
