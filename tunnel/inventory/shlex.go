package inventory

import "errors"

// splitWords splits s as Python's shlex.split does in POSIX mode, which is
// how Ansible splits an INI host line (with comments: a # outside quotes
// ends the line) and ansible_ssh_common_args (without).
func splitWords(s string, comments bool) ([]string, error) {
	var (
		words []string
		cur   []byte
		in    bool // inside a word, even an empty quoted one
	)
	end := func() {
		if in {
			words = append(words, string(cur))
		}
		cur, in = cur[:0], false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			end()
		case c == '#' && comments:
			end()
			return words, nil
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("no escaped character after a backslash")
			}
			i++
			cur, in = append(cur, s[i]), true
		case c == '\'':
			j := i + 1
			for j < len(s) && s[j] != '\'' {
				j++
			}
			if j == len(s) {
				return nil, errors.New("no closing quotation")
			}
			cur, in = append(cur, s[i+1:j]...), true
			i = j
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\') {
					j++
				}
				cur = append(cur, s[j])
			}
			if j == len(s) {
				return nil, errors.New("no closing quotation")
			}
			in = true
			i = j
		default:
			cur, in = append(cur, c), true
		}
	}
	end()
	return words, nil
}
