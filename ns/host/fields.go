package host

import (
	"errors"
	"fmt"
	"strings"
)

// fields splits a request of key=value words at spaces, as strings.Fields
// does, except inside quotes, so that a value may hold spaces (a directory
// named "my project"): 'single' quotes keep everything up to the next one,
// "double" quotes take \" and \\ as escapes, and outside them a backslash
// keeps a quote, a space or a backslash. Quotes may join parts of a word,
// as a shell's do: cwd='/home/me/my project'.
func fields(s string) ([]string, error) {
	var out []string
	var b strings.Builder
	in := false // inside a word
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		case c == '\\' && i+1 < len(s) && strings.IndexByte(`'" \\`, s[i+1]) >= 0:
			// Outside quotes a backslash keeps a quote, a space or
			// itself; before anything else it is itself.
			i++
			b.WriteByte(s[i])
			in = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("a ' quote is not closed")
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`a " quote is not closed`)
			}
			in = true
		default:
			b.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out, nil
}

// A keyValue is one key=value word of a request.
type keyValue struct{ key, value string }

// keyValues splits a request of key=value words (fields) into its words,
// in order, refusing a word that is not key=value and a key given twice:
// which of the two was meant is not for olliesrv to guess, and a check of
// the first would pass while the last took effect. keys are the keys the
// request takes, for the errors; a key not among them is the caller's to
// refuse, with what it means.
func keyValues(s string, keys []string) ([]keyValue, error) {
	words, err := fields(s)
	if err != nil {
		return nil, err
	}
	var out []keyValue
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value (keys: %s)", w, strings.Join(keys, ", "))
		}
		for _, kv := range out {
			if kv.key == k {
				return nil, fmt.Errorf("%s given twice: give each key once (keys: %s)", k, strings.Join(keys, ", "))
			}
		}
		out = append(out, keyValue{k, v})
	}
	return out, nil
}
