package chat

// Quick scans of a reply's text before it is parsed: whether rendering
// would change it (Worth), and whether it would take too long (costly).

import "strings"

// Limits of what costly lets render take. Parsing and rendering recurse
// once per level of nesting, with little stack a level, but some text
// takes time quadratic in its length: goldmark's matching of emphasis
// and link delimiters for some runs of them (32 KiB of "*a_ " takes
// 0.3 s, of unclosed links "[a](b" 0.35 s), and the prefixes of deeply
// nested blocks (10 KiB of ">" 0.45 s). Within these limits a reply
// renders in tens of milliseconds, well under the budget.
const (
	maxRenderBytes = 32 << 10 // ordinary markdown: about 15 ms here
	maxNesting     = 6        // block quotes and list markers opening one line
	maxIndent      = 24       // column of the innermost of those
	maxDepthSum    = 1000     // nesting (markers + columns/2) summed over lines
	maxWord        = 1000     // bytes without a space
	maxDelims      = 1000     // * _ ~ [ between two blank lines
)

// costly reports whether text is more than render renders promptly (see
// the limits above). It errs towards true: such text shows as written. It
// applies its limits in code blocks too, because where a code block ends
// is for goldmark to say (a fence inside an HTML block or a list item is
// not one at the top level) and a scan that got it wrong would let
// through what it must not. Delimiters are matched within a paragraph,
// which a blank line ends.
func costly(text string) bool {
	if len(text) > maxRenderBytes {
		return true
	}
	delims, depthSum := 0, 0
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		s := strings.TrimLeft(line, " \t")
		if s == "" {
			delims = 0
			continue
		}
		n, col := containers(line)
		if n > 0 {
			depthSum += n + col/2
		}
		if n > maxNesting || col > maxIndent || depthSum > maxDepthSum {
			return true
		}
		for w := range strings.FieldsSeq(line) {
			if len(w) > maxWord {
				return true
			}
		}
		delims += strings.Count(line, "*") + strings.Count(line, "_") +
			strings.Count(line, "~") + strings.Count(line, "[")
		if delims > maxDelims {
			return true
		}
	}
	return false
}

// containers counts the block quote and list markers that open line, and
// returns the column of the last one (a tab counted as 4): how deep
// line's blocks nest, by markers and by indentation.
func containers(line string) (n, col int) {
	c := 0
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ':
			c++
			i++
			continue
		case '\t':
			c += 4
			i++
			continue
		}
		m := markerLen(line[i:])
		if m == 0 {
			break
		}
		n, col = n+1, c
		c += m
		i += m
	}
	return n, col
}

// markerLen returns the length of the block quote or list marker that
// starts s, or 0.
func markerLen(s string) int {
	if s == "" {
		return 0
	}
	if s[0] == '>' {
		return 1
	}
	if strings.IndexByte("-*+", s[0]) >= 0 {
		if len(s) == 1 || s[1] == ' ' || s[1] == '\t' {
			return 1
		}
		return 0
	}
	i := 0
	for i < len(s) && i < 10 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i == len(s) || (s[i] != '.' && s[i] != ')') {
		return 0
	}
	if i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\t' {
		return i + 1
	}
	return 0
}

// Worth reports whether text has markdown that rendering would change:
// headings, emphasis, code spans and blocks, lists, links, tables, block
// quotes, rules. Plain prose need not be re-drawn. It errs towards true,
// which costs only a redraw.
func Worth(text string) bool {
	if strings.Count(text, "`") >= 2 || // code spans and ``` blocks
		strings.Contains(text, "**") || strings.Contains(text, "__") ||
		strings.Contains(text, "~~") || // strike-through and ~~~ blocks
		strings.Contains(text, "](") || strings.Contains(text, "][") ||
		strings.Contains(text, "<http") {
		return true
	}
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		s := strings.TrimLeft(line, " \t")
		if s == "" {
			continue
		}
		if heading(s) || markerLen(s) > 0 || rule(s) || tableRule(s) ||
			emphasis(line, '*') || emphasis(line, '_') ||
			strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") ||
			linkDefinition(s) {
			return true
		}
	}
	return false
}

// heading reports whether s starts with an ATX heading's marker.
func heading(s string) bool {
	n := len(s) - len(strings.TrimLeft(s, "#"))
	return 1 <= n && n <= 6 && (n == len(s) || s[n] == ' ' || s[n] == '\t')
}

// rule reports whether s is a thematic break or a setext heading's
// underline: three or more of one of - * _ =, and spaces.
func rule(s string) bool {
	c := s[0]
	if strings.IndexByte("-*_=", c) < 0 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case c:
			n++
		case ' ', '\t':
		default:
			return false
		}
	}
	return n >= 3 || c == '=' // "=" under a line makes a heading
}

// tableRule reports whether s is a table's delimiter row: pipes, dashes,
// colons and spaces, with at least one pipe and one dash.
func tableRule(s string) bool {
	return strings.Trim(s, "|-: \t") == "" &&
		strings.Contains(s, "|") && strings.Contains(s, "-")
}

// linkDefinition reports whether s looks like a link reference
// definition, "[label]: destination", which renders as nothing.
func linkDefinition(s string) bool {
	if s[0] != '[' {
		return false
	}
	i := strings.Index(s, "]:")
	return i > 1
}

// emphasis reports whether line has a pair of c (* or _) that would
// emphasize what is between them: an opener followed by a non-space and a
// closer preceded by one. An underscore inside a word (snake_case) opens
// and closes nothing.
func emphasis(line string, c byte) bool {
	inWord := func(j int) bool { return j >= 0 && j < len(line) && isWordByte(line[j]) }
	open := -1
	for i := 0; i < len(line); i++ {
		if line[i] != c {
			continue
		}
		if open >= 0 && i > open+1 && !isSpace(line[i-1]) && (c == '*' || !inWord(i+1)) {
			return true
		}
		if open < 0 && i+1 < len(line) && !isSpace(line[i+1]) && line[i+1] != c &&
			(c == '*' || !inWord(i-1)) {
			open = i
		}
	}
	return false
}

func isSpace(c byte) bool    { return c == ' ' || c == '\t' }
func isWordByte(c byte) bool { return isDigit(c) || isLetter(c) || c >= 0x80 }
