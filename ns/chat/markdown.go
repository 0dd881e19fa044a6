package chat

import (
	"html"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/glamour/styles"
	"golang.org/x/term"

	"ollie/internal/termsafe"
)

// Styled reports whether out should get rendered markdown: out is a
// terminal (an *os.File for which term.IsTerminal is true), NO_COLOR is
// unset or empty (https://no-color.org), and TERM is not "dumb", the name
// of a terminal that shows escape sequences rather than acting on them.
func Styled(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// A Markdown renders replies; with styled false, Render returns the text
// as written. A Markdown holds no state between replies and is safe for
// concurrent use.
type Markdown struct {
	styled bool
	width  int
}

// defaultWidth is the wrap width when the terminal's is not known.
const defaultWidth = 80

// NewMarkdown returns a Markdown wrapping at width, the terminal's columns
// (0 or less: 80). A terminal that is resized wants a new Markdown.
func NewMarkdown(styled bool, width int) *Markdown {
	if width <= 0 {
		width = defaultWidth
	}
	return &Markdown{styled: styled, width: width}
}

// Render returns text rendered for the terminal: styled, wrapped to the
// width, no line ending in the spaces glamour pads lines with (so a
// copy-paste from a narrow window stays clean; a heading keeps the one
// coloured space that ends its bar), no blank lines before or after (the
// spacing around a reply is the caller's), and ending with exactly one
// newline.
//
// It returns text as written when the Markdown is unstyled, when rendering
// fails or would show nothing, and when text is one that glamour takes too
// long or too deep a stack for (see costly): the model's text is untrusted
// and may be written to hang or crash the chat, and raw markdown is still
// readable.
//
// text must already be safe to show (termsafe.Text): Render keeps it so.
// Glamour decodes character references, so a reply could spell an escape
// sequence as "&#27;[2J"; such references are shown as written, and
// anything in glamour's output that is not one of its colour codes is made
// visible as termsafe makes it.
func (m *Markdown) Render(text string) string {
	if !m.styled || costly(text) {
		return text
	}
	if out := bounded(renderBudget, func() string { return render(text, m.width) }); out != "" {
		return out
	}
	return text
}

// renderBudget is how long Render waits for glamour before showing the
// text as written. A reply within the limits of costly takes well under
// it; it bounds what a case costly does not foresee can cost.
const renderBudget = time.Second

// stuck is set while a render that ran past renderBudget goes on in the
// background (a goroutine cannot be stopped): until it ends, Render shows
// text as written rather than start another.
var stuck atomic.Bool

// bounded returns f(), or "" if that takes longer than budget or an
// earlier f that did is still running.
func bounded(budget time.Duration, f func() string) string {
	if stuck.Load() {
		return ""
	}
	done := make(chan string, 1)
	var late atomic.Bool
	go func() {
		done <- f()
		if late.Load() {
			stuck.Store(false)
		}
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case out := <-done:
		return out
	case <-timer.C:
		stuck.Store(true)
		late.Store(true)
		// f may have returned between the timer and late being set, and
		// seen late false.
		select {
		case <-done:
			stuck.Store(false)
		default:
		}
		return ""
	}
}

// render renders text with glamour and tidies the result; "" if glamour
// fails, panics, or shows nothing.
func render(text string, width int) (out string) {
	defer func() {
		if recover() != nil {
			out = ""
		}
	}()
	r, err := glamour.NewTermRenderer(
		// A fixed style: glamour's auto style asks the terminal for its
		// background colour (OSC 11) and waits for the answer, which over
		// ssh arrives as typed input, or never. Dark suits most terminals;
		// its colours are from the 256-colour palette, which every
		// terminal people ssh from has.
		glamour.WithStandardStyle(styles.DarkStyle),
		glamour.WithWordWrap(width),
	)
	if err != nil {
		return ""
	}
	out, err = r.Render(quoteControlRefs(text))
	if err != nil {
		return ""
	}
	return tidy(out)
}

// Limits of what costly lets glamour render. Glamour recurses once per
// level of nesting, with some KiB of stack a level: 64 KiB of "**"
// overflows the stack, which kills the process rather than panicking, and
// would do so even in a render Render has given up waiting for. Long
// words, nested links and blocks, and many headings (goldmark gives each
// a unique id by counting the ones before it) take time quadratic or
// worse. Within these limits a reply renders in well under the budget.
const (
	maxRenderBytes = 32 << 10 // ordinary markdown: about half a second here
	maxNesting     = 6        // block quotes and list markers opening one line
	maxIndent      = 24       // column of the innermost of those
	maxDepthSum    = 1000     // nesting (markers + columns/2) summed over lines
	maxHeadings    = 200
	maxWord        = 1000 // bytes without a space
	maxDelims      = 1000 // * _ ~ [ between two blank lines
)

// costly reports whether text is more than glamour renders promptly and
// in bounded stack (see the limits above). It errs towards true: such
// text shows as written. It applies its limits in code blocks too,
// because where a code block ends is for goldmark to say (a fence inside
// an HTML block or a list item is not one at the top level) and a scan
// that got it wrong would let through what it must not. Inline markup,
// whose nesting costs stack, does not nest across a blank line.
func costly(text string) bool {
	if len(text) > maxRenderBytes {
		return true
	}
	delims, depthSum, headings := 0, 0, 0
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
		if heading(s) || rule(s) {
			if headings++; headings > maxHeadings {
				return true
			}
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

// quoteControlRefs writes as &amp; the & of each character reference in
// text that stands for a character termsafe would make visible (&#27; is
// ESC, &lrm; a bidi mark), so that the reference shows as written instead
// of glamour decoding it (with html.UnescapeString, code spans included)
// into what termsafe took out. A reference is scanned as
// html.UnescapeString scans it, so the two agree on where it ends.
func quoteControlRefs(text string) string {
	if !strings.Contains(text, "&") {
		return text
	}
	var b strings.Builder
	b.Grow(len(text) + 16)
	for {
		i := strings.IndexByte(text, '&')
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		text = text[i:]
		ref := text[:refLen(text)]
		if dec := html.UnescapeString(ref); dec != ref && !termsafe.Safe(dec, true) {
			b.WriteString("&amp;")
		} else {
			b.WriteByte('&')
		}
		text = text[1:]
	}
}

// refLen returns the length of what may be a character reference at the
// start of s, which begins with '&': "&#" and digits, "&#x" and hex
// digits, or "&" and letters and digits, then an optional ';'.
func refLen(s string) int {
	i := 1
	if i < len(s) && s[i] == '#' {
		i++
		hex := i < len(s) && (s[i] == 'x' || s[i] == 'X')
		if hex {
			i++
		}
		for i < len(s) && (isDigit(s[i]) || hex && isHexLetter(s[i])) {
			i++
		}
	} else {
		for i < len(s) && (isDigit(s[i]) || isLetter(s[i])) {
			i++
		}
	}
	if i < len(s) && s[i] == ';' {
		i++
	}
	return i
}

func isDigit(c byte) bool     { return '0' <= c && c <= '9' }
func isLetter(c byte) bool    { return 'a' <= c|0x20 && c|0x20 <= 'z' }
func isHexLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'f' }

// tidy makes glamour's output ready to print: whatever in it is not a
// colour code made visible, the padding at each line's end and the blank
// lines around it dropped, one newline at the end; "" if nothing shows.
// The colour codes of dropped padding and lines are kept (collapsed), so
// every line starts in the colours glamour left it.
func tidy(out string) string {
	lines := strings.Split(collapseSGR(out), "\n")
	first, last := -1, -1
	for i, line := range lines {
		var shows bool
		lines[i], shows = trimLine(safeLine(line))
		if shows {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(len(out) / 4)
	for _, line := range lines[:first] {
		b.WriteString(line) // only colour codes
	}
	b.WriteString(strings.Join(lines[first:last+1], "\n"))
	for _, line := range lines[last+1:] {
		b.WriteString(line)
	}
	b.WriteByte('\n')
	return collapseSGR(b.String())
}

// sgrLen returns the length of the SGR sequence (ESC [ parameters m, a
// colour or attribute code) that starts s, or 0.
func sgrLen(s string) int {
	if len(s) < 3 || s[0] != 0x1b || s[1] != '[' {
		return 0
	}
	for i := 2; i < len(s); i++ {
		switch c := s[i]; {
		case c == 'm':
			return i + 1
		case isDigit(c) || c == ';' || c == ':':
		default:
			return 0
		}
	}
	return 0
}

// safeLine returns line, one line of glamour's output, with everything
// but its SGR sequences as termsafe.Text shows it.
func safeLine(line string) string {
	if termsafe.Safe(line, true) {
		return line
	}
	var b strings.Builder
	for line != "" {
		if n := sgrLen(line); n > 0 {
			b.WriteString(line[:n])
			line = line[n:]
			continue
		}
		// Up to the next ESC that may start an SGR; at least one byte.
		i := 1 + strings.IndexByte(line[1:], 0x1b)
		if i == 0 {
			i = len(line)
		}
		b.WriteString(termsafe.Text(line[:i]))
		line = line[i:]
	}
	return b.String()
}

// trimLine drops the spaces after the last character of line that shows,
// unless a background colour, reverse video, underline, strike-through or
// overline makes them show too (a heading's coloured bar); the SGR codes
// among them are kept. It reports whether anything in line shows.
func trimLine(line string) (string, bool) {
	var st sgrState
	end := -1 // just after the last byte that shows
	for i := 0; i < len(line); {
		if n := sgrLen(line[i:]); n > 0 {
			st.apply(line[i+2 : i+n-1])
			i += n
			continue
		}
		if line[i] != ' ' || st.marks() {
			end = i + 1
		}
		i++
	}
	if end < 0 {
		return sgrOnly(line), false
	}
	return line[:end] + sgrOnly(line[end:]), true
}

// sgrOnly returns the SGR sequences in s.
func sgrOnly(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if n := sgrLen(s[i:]); n > 0 {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		i++
	}
	return b.String()
}

// collapseSGR drops, in each run of adjacent SGR sequences, those before
// the last one that begins with a reset: they set nothing that shows.
// Glamour wraps every padding space in its own colour and reset, so this
// shrinks its output several times.
func collapseSGR(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		n := sgrLen(s[i:])
		if n == 0 {
			j := strings.IndexByte(s[i+1:], 0x1b)
			if j < 0 {
				b.WriteString(s[i:])
				break
			}
			b.WriteString(s[i : i+1+j])
			i += 1 + j
			continue
		}
		keep := i
		for n > 0 {
			if resets(s[i+2 : i+n-1]) {
				keep = i
			}
			i += n
			n = sgrLen(s[i:])
		}
		b.WriteString(s[keep:i])
	}
	return b.String()
}

// resets reports whether SGR parameters begin with a reset (0 or none).
func resets(params string) bool {
	first, _, _ := strings.Cut(params, ";")
	first, _, _ = strings.Cut(first, ":")
	return strings.Trim(first, "0") == ""
}

// sgrState is what of the SGR attributes in effect makes a space show.
type sgrState struct {
	background, reverse, underline, strike, overline bool
}

func (st sgrState) marks() bool {
	return st.background || st.reverse || st.underline || st.strike || st.overline
}

// apply applies the parameters of one SGR sequence.
func (st *sgrState) apply(params string) {
	skip := 0 // arguments of an extended colour still to pass over
	for rest, more := params, true; more; {
		var p string
		p, rest, more = strings.Cut(rest, ";")
		if skip > 0 {
			skip--
			continue
		}
		code, sub, colon := strings.Cut(p, ":")
		n := 0
		if code != "" {
			var err error
			if n, err = strconv.Atoi(code); err != nil {
				continue
			}
		}
		switch {
		case n == 0:
			*st = sgrState{}
		case n == 4:
			st.underline = sub != "0" // 4:0 is "no underline"
		case n == 21:
			st.underline = true // double
		case n == 24:
			st.underline = false
		case n == 7:
			st.reverse = true
		case n == 27:
			st.reverse = false
		case n == 9:
			st.strike = true
		case n == 29:
			st.strike = false
		case n == 53:
			st.overline = true
		case n == 55:
			st.overline = false
		case 40 <= n && n <= 47, 100 <= n && n <= 107:
			st.background = true
		case n == 49:
			st.background = false
		case n == 38, n == 48, n == 58:
			if n == 48 {
				st.background = true
			}
			// An extended colour's arguments follow as parameters of
			// their own unless given with colons: 5;N or 2;R;G;B.
			if !colon {
				switch kind, _, _ := strings.Cut(rest, ";"); kind {
				case "5":
					skip = 2
				case "2":
					skip = 4
				}
			}
		}
	}
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
