package tool

// NameRule is what a tool's name matches, as a regular expression: a
// lowercase letter, then up to 63 lowercase letters, digits and "_". A
// .meta's name is its file's, and toolsrv refuses any other; the
// desktop's broker refuses a request naming a tool outside the rule, so
// that a name is an identifier and never a sentence.
const NameRule = `^[a-z][a-z0-9_]{0,63}$`

// MaxNameLen is the longest name NameRule admits.
const MaxNameLen = 64

// ValidName reports whether s matches NameRule.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
