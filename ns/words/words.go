// Package words is the grammar of the namespace's requests: the words of
// a ctl or new file's request (name=a cwd='/my project'), split as Split
// does, and Quote, which every client that writes a request uses, so that
// what a client quotes is one word to the server whatever it holds.
package words

import (
	"errors"
	"strings"
)

// Split splits a request of key=value words at spaces, as strings.Fields
// does, except inside quotes, so that a value may hold spaces (a directory
// named "my project"): 'single' quotes keep everything up to the next one,
// "double" quotes take \" and \\ as escapes, and outside them a backslash
// keeps a quote, a space or a backslash. Quotes may join parts of a word,
// as a shell's do: cwd='/home/me/my project'.
func Split(s string) ([]string, error) {
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

// Quote makes s one word of a request, whatever it holds (spaces,
// quotes, newlines): Split(Quote(s)) is []string{s}, and key=Quote(v) is
// the one word key=v.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
