package chat

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	gtext "github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
	"golang.org/x/term"
	"golang.org/x/text/width"

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

// Render returns text rendered for the terminal: styled with SGR codes
// (colours and attributes, nothing else), wrapped to the width, no line
// ending in spaces, no blank lines before or after (the spacing around a
// reply is the caller's), and ending with exactly one newline.
//
// It returns text as written when the Markdown is unstyled, when
// rendering fails or would show nothing, and when text is one that would
// take too long to render (see costly): the model's text is untrusted and
// may be written to hang the chat, and raw markdown is still readable.
//
// text must already be safe to show (termsafe.Text): Render keeps it so.
// A character reference that stands for a character termsafe would make
// visible ("&#27;[2J" spells an escape sequence) shows as written.
func (m *Markdown) Render(text string) string {
	if !m.styled || costly(text) {
		return text
	}
	if out := bounded(renderBudget, func() string { return render(text, m.width) }); out != "" {
		return out
	}
	return text
}

// renderBudget is how long Render waits for render before showing the
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

// render renders text for a terminal width columns wide, or returns ""
// if that panics or shows nothing. It draws headings bold (the first
// level underlined too), **strong** bold, *emphasis* italic, ~~strike~~
// struck through, code in cyan (a block as written, indented by two
// spaces), lists with "•" or their numbers, block quotes behind a faint
// bar, links as "text (url)" with the url faint, rules as a faint line,
// tables in columns, and the rest (raw HTML, images' urls) as text;
// paragraphs wrap at the width, one blank line between blocks.
func render(text string, width int) (out string) {
	defer func() {
		if recover() != nil {
			out = ""
		}
	}()
	src := []byte(text)
	r := renderer{src: src}
	lines := r.blocks(mdParser().Parse(gtext.NewReader(src)), width)
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// mdParser returns the markdown parser: CommonMark, with GitHub's tables
// and ~~strike-through~~ as this file parses them (goldmark's extension
// package compiles a dozen regular expressions when the binary starts,
// 1.1 ms that every tool call, a start of the binary, would pay). It is
// made on first use, not at start.
var mdParser = sync.OnceValue(func() parser.Parser {
	return parser.NewParser(
		parser.WithBlockParsers(parser.DefaultBlockParsers()...),
		parser.WithInlineParsers(append(parser.DefaultInlineParsers(),
			util.Prioritized(strikeParser{}, 500))...),
		parser.WithParagraphTransformers(append(parser.DefaultParagraphTransformers(),
			util.Prioritized(tableParser{}, 200))...),
	)
})

// A style is a set of SGR attributes.
type style uint8

const (
	bold style = 1 << iota
	faint
	italic
	underline
	strike
	code // a colour: SGR 36, cyan
)

const reset = "\x1b[0m"

// sgr returns the SGR sequence that sets st and nothing else.
func (st style) sgr() string {
	if st == 0 {
		return reset
	}
	b := make([]byte, 0, 16)
	b = append(b, "\x1b[0"...)
	for _, a := range [...]struct {
		st    style
		param string
	}{{bold, ";1"}, {faint, ";2"}, {italic, ";3"}, {underline, ";4"}, {strike, ";9"}, {code, ";36"}} {
		if st&a.st != 0 {
			b = append(b, a.param...)
		}
	}
	return string(append(b, 'm'))
}

// paint returns s in st, then the colours reset.
func paint(s string, st style) string { return st.sgr() + s + reset }

// A span is inline text in one style, or a hard line break.
type span struct {
	text string
	st   style
	brk  bool
}

// A renderer renders one document, the blocks of which are parsed from
// src. Every line it makes starts in no style and ends with the style
// reset, so a line can be prefixed (a quote's bar, a list's indent).
type renderer struct {
	src     []byte
	inTable bool
}

// blocks renders the children of parent, one blank line between blocks
// except after the text of a tight list's item.
func (r *renderer) blocks(parent ast.Node, width int) []string {
	width = max(width, 1)
	var out []string
	var prev ast.Node
	for c := parent.FirstChild(); c != nil; c = c.NextSibling() {
		lines := r.block(c, width)
		if len(lines) == 0 {
			continue
		}
		if _, tight := prev.(*ast.TextBlock); prev != nil && !tight {
			out = append(out, "")
		}
		out = append(out, lines...)
		prev = c
	}
	return out
}

func (r *renderer) block(n ast.Node, width int) []string {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		lines, _ := wrap(r.inline(n, 0, nil), width)
		return lines
	case *ast.Heading:
		st := bold
		if n.Level == 1 {
			st |= underline
		}
		lines, _ := wrap(r.inline(n, st, nil), width)
		return lines
	case *ast.ThematicBreak:
		return []string{paint(strings.Repeat("─", width), faint)}
	case *ast.CodeBlock, *ast.FencedCodeBlock:
		return r.code(n)
	case *ast.Blockquote:
		return prefixed(r.blocks(n, width-2), quoteBar, quoteBar)
	case *ast.List:
		return r.list(n, width)
	case *ast.HTMLBlock:
		lines := r.raw(n.Lines())
		if n.HasClosure() {
			closure := gtext.NewSegments()
			closure.Append(n.ClosureLine)
			lines = append(lines, r.raw(closure)...)
		}
		return lines
	case *ast.LinkReferenceDefinition:
		return nil
	case *tableNode:
		return r.table(n, width)
	}
	if n.HasChildren() {
		return r.blocks(n, width)
	}
	return r.raw(n.Lines())
}

// quoteBar is what a block quote's lines start with.
var quoteBar = paint("│", faint) + " "

// prefixed returns lines with first before the first of them and rest
// before the others; an empty line gets the prefix without its trailing
// spaces.
func prefixed(lines []string, first, rest string) []string {
	for i, line := range lines {
		p := rest
		if i == 0 {
			p = first
		}
		if line == "" {
			p = strings.TrimRight(p, " ")
		}
		lines[i] = p + line
	}
	return lines
}

// code renders a code block: its lines as written, in the code colour,
// indented by two spaces, not wrapped.
func (r *renderer) code(n ast.Node) []string {
	lines := r.raw(n.Lines())
	for i, line := range lines {
		if line != "" {
			lines[i] = "  " + paint(line, code)
		}
	}
	return lines
}

// raw returns the text of segs as written, a line each, without trailing
// spaces.
func (r *renderer) raw(segs *gtext.Segments) []string {
	var lines []string
	for i := range segs.Len() {
		seg := segs.At(i)
		lines = append(lines, strings.TrimRight(safe(seg.Value(r.src)), " \t\n"))
	}
	return lines
}

// list renders a list: "•" or the item's number before each item, whose
// blocks are indented past it; a blank line between the items of a loose
// list.
func (r *renderer) list(l *ast.List, width int) []string {
	var marks []string
	for i := range l.ChildCount() {
		if l.IsOrdered() {
			marks = append(marks, strconv.Itoa(l.Start+i)+string(l.Marker))
		} else {
			marks = append(marks, "•")
		}
	}
	mw := 0
	for _, m := range marks {
		mw = max(mw, strWidth(m))
	}
	var out []string
	i := 0
	for item := l.FirstChild(); item != nil; item = item.NextSibling() {
		body := r.blocks(item, width-mw-1)
		if len(body) == 0 {
			body = []string{""}
		}
		if i > 0 && !l.IsTight {
			out = append(out, "")
		}
		first := strings.Repeat(" ", mw-strWidth(marks[i])) + marks[i] + " "
		out = append(out, prefixed(body, first, strings.Repeat(" ", mw+1))...)
		i++
	}
	return out
}

// inline appends to out the spans of n's inline children, in st and
// what they add to it.
func (r *renderer) inline(n ast.Node, st style, out []span) []span {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		out = r.inlineNode(c, st, out)
	}
	return out
}

func (r *renderer) inlineNode(n ast.Node, st style, out []span) []span {
	add := func(s string, st style) { out = append(out, span{text: s, st: st}) }
	switch n := n.(type) {
	case *ast.Text:
		if n.IsRaw() {
			add(safe(n.Segment.Value(r.src)), st)
		} else {
			add(unescape(n.Segment.Value(r.src)), st)
		}
		if n.HardLineBreak() {
			out = append(out, span{brk: true})
		} else if n.SoftLineBreak() {
			add(" ", st)
		}
	case *ast.String:
		if n.IsCode() || n.IsRaw() {
			add(safe(n.Value), st)
		} else {
			add(unescape(n.Value), st)
		}
	case *ast.CodeSpan:
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			var s string
			switch c := c.(type) {
			case *ast.Text:
				s = safe(c.Segment.Value(r.src))
			case *ast.String:
				s = safe(c.Value)
			}
			if r.inTable {
				// A pipe in a table's cell is written \|, in code too.
				s = strings.ReplaceAll(s, `\|`, "|")
			}
			add(s, st|code)
		}
	case *ast.Emphasis:
		if n.Level >= 2 {
			return r.inline(n, st|bold, out)
		}
		return r.inline(n, st|italic, out)
	case *strikeNode:
		return r.inline(n, st|strike, out)
	case *ast.Link:
		return r.link(n, unescape(n.Destination), st, out)
	case *ast.Image:
		return r.link(n, unescape(n.Destination), st, out)
	case *ast.AutoLink:
		add(safe(n.Label(r.src)), st&^bold|faint)
	case *ast.RawHTML:
		for i := range n.Segments.Len() {
			seg := n.Segments.At(i)
			add(safe(seg.Value(r.src)), st)
		}
	default:
		return r.inline(n, st, out)
	}
	return out
}

// link appends a link's text and then, unless it is the text, its url:
// "text (url)", the url faint.
func (r *renderer) link(n ast.Node, url string, st style, out []span) []span {
	start := len(out)
	out = r.inline(n, st, out)
	var text strings.Builder
	for _, s := range out[start:] {
		text.WriteString(s.text)
	}
	if t := text.String(); url == "" || url == t || url == "mailto:"+t {
		return out
	}
	return append(out, span{text: " (", st: st}, span{text: url, st: st&^bold | faint}, span{text: ")", st: st})
}

// table renders a table: its cells in columns as wide as their widest,
// separated by a faint "│", the header bold and ruled off. A table wider
// than width has its widest columns narrowed and their cells wrapped; one
// too wide for that shows as written.
func (r *renderer) table(t *tableNode, width int) []string {
	ncol := len(t.aligns)
	var rows [][][]span
	natural := make([]int, ncol)
	r.inTable = true
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		st := style(0)
		if row == t.FirstChild() {
			st = bold
		}
		var cells [][]span
		for c := row.FirstChild(); c != nil; c = c.NextSibling() {
			cell := r.inline(c, st, nil)
			_, widths := wrap(cell, maxWidth)
			natural[len(cells)] = max(natural[len(cells)], slices.Max(append(widths, 1)))
			cells = append(cells, cell)
		}
		rows = append(rows, cells)
	}
	r.inTable = false
	cols := fitColumns(natural, width-3*(ncol-1))
	if cols == nil {
		var out []string
		for _, line := range r.raw(&t.source) {
			lines, _ := wrap([]span{{text: line}}, width)
			out = append(out, lines...)
		}
		return out
	}
	sep := " " + paint("│", faint) + " "
	var out []string
	for i, cells := range rows {
		var lines [][]string
		var widths [][]int
		height := 1
		for c, cell := range cells {
			l, w := wrap(cell, cols[c])
			lines, widths = append(lines, l), append(widths, w)
			height = max(height, len(l))
		}
		for k := range height {
			var b strings.Builder
			for c := range cells {
				if c > 0 {
					b.WriteString(sep)
				}
				text, w := "", 0
				if k < len(lines[c]) {
					text, w = lines[c][k], widths[c][k]
				}
				pad, left := max(cols[c]-w, 0), 0
				switch t.aligns[c] {
				case alignRight:
					left = pad
				case alignCenter:
					left = pad / 2
				}
				b.WriteString(strings.Repeat(" ", left))
				b.WriteString(text)
				b.WriteString(strings.Repeat(" ", pad-left))
			}
			out = append(out, trimEnd(b.String()))
		}
		if i == 0 {
			var rule strings.Builder
			for c, w := range cols {
				if c > 0 {
					rule.WriteString("┼")
				}
				n := w + 2
				if c == 0 || c == len(cols)-1 {
					n--
				}
				if len(cols) == 1 {
					n = w
				}
				rule.WriteString(strings.Repeat("─", n))
			}
			out = append(out, paint(rule.String(), faint))
		}
	}
	return out
}

// maxWidth stands for a width without limit.
const maxWidth = 1 << 30

// minColumn is the narrowest fitColumns makes a column.
const minColumn = 4

// fitColumns returns the widths of columns whose cells are natural
// columns wide, fitting in avail: the widest narrowed to a common width,
// what is left over shared among them. It returns nil if that width
// would be under minColumn.
func fitColumns(natural []int, avail int) []int {
	sum := func(limit int) int {
		n := 0
		for _, w := range natural {
			n += min(w, limit)
		}
		return n
	}
	cols := slices.Clone(natural)
	widest := slices.Max(natural)
	if sum(widest) <= avail {
		return cols
	}
	// The largest limit at which the columns fit.
	lo, hi := 0, widest // sum(lo) fits, sum(hi) does not
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; sum(mid) <= avail {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo < minColumn {
		return nil
	}
	left := avail - sum(lo)
	for i, w := range natural {
		cols[i] = min(w, lo)
		if w > lo && left > 0 {
			cols[i]++
			left--
		}
	}
	return cols
}

// trimEnd drops the spaces at the end of line, keeping the SGR sequences
// among them.
func trimEnd(line string) string {
	var codes []string
	for {
		if s := strings.TrimRight(line, " "); len(s) < len(line) {
			line = s
			continue
		}
		i := strings.LastIndex(line, "\x1b[")
		if i < 0 || !strings.HasSuffix(line, "m") || strings.Trim(line[i+2:len(line)-1], "0123456789;") != "" {
			break
		}
		codes = append(codes, line[i:])
		line = line[:i]
	}
	for i := len(codes) - 1; i >= 0; i-- {
		line += codes[i]
	}
	return line
}

// wrap lays spans out in lines of at most width columns, breaking at
// spaces, and at hard breaks; a word wider than width is broken where it
// reaches it. Runs of spaces show as one, except in code. It returns the
// lines and their widths; none if spans show nothing.
func wrap(spans []span, width int) (lines []string, widths []int) {
	type piece struct {
		text string
		st   style
		w    int
	}
	var (
		line, word []piece
		lineW      int
		wordW      int
		gap        piece // the spaces before word, if hasGap
		hasGap     bool
	)
	emit := func() {
		var b strings.Builder
		cur := style(0)
		for _, p := range line {
			if p.st != cur {
				b.WriteString(p.st.sgr())
				cur = p.st
			}
			b.WriteString(p.text)
		}
		if cur != 0 {
			b.WriteString(reset)
		}
		lines, widths = append(lines, b.String()), append(widths, lineW)
		line, lineW = line[:0], 0
	}
	endWord := func() {
		if len(word) == 0 {
			return
		}
		if lineW > 0 && hasGap {
			if lineW+gap.w+wordW > width {
				emit()
			} else {
				line, lineW = append(line, gap), lineW+gap.w
			}
		}
		hasGap = false
		if lineW+wordW <= width {
			line, lineW = append(line, word...), lineW+wordW
			word, wordW = word[:0], 0
			return
		}
		// Too wide for a line of its own: break it between runes.
		for _, p := range word {
			for len(p.text) > 0 {
				n, w := 0, 0
				for i, c := range p.text {
					cw := runeWidth(c)
					if cw > 0 && lineW+w+cw > width && (lineW > 0 || w > 0) {
						break
					}
					_, size := utf8.DecodeRuneInString(p.text[i:])
					n, w = i+size, w+cw
				}
				if n > 0 {
					line, lineW = append(line, piece{p.text[:n], p.st, w}), lineW+w
					p.text = p.text[n:]
				}
				if len(p.text) > 0 {
					emit()
				}
			}
		}
		word, wordW = word[:0], 0
	}
	for _, sp := range spans {
		if sp.brk {
			endWord()
			emit()
			hasGap = false
			continue
		}
		for s := sp.text; s != ""; {
			i := strings.IndexAny(s, " \t\n")
			if i == 0 {
				j := len(s) - len(strings.TrimLeft(s, " \t\n"))
				endWord()
				if !hasGap {
					n := 1
					if sp.st&code != 0 {
						n = j
					}
					gap, hasGap = piece{strings.Repeat(" ", n), sp.st, n}, true
				}
				s = s[j:]
				continue
			}
			if i < 0 {
				i = len(s)
			}
			w := strWidth(s[:i])
			word, wordW = append(word, piece{s[:i], sp.st, w}), wordW+w
			s = s[i:]
		}
	}
	endWord()
	if len(line) > 0 {
		emit()
	}
	return lines, widths
}

// strWidth returns the columns s takes on a terminal.
func strWidth(s string) int {
	w := 0
	for _, r := range s {
		w += runeWidth(r)
	}
	return w
}

// runeWidth returns the columns r takes on a terminal: 2 for the wide
// characters of East Asian scripts (and most emoji), 0 for combining
// marks and other characters that add to the one before.
func runeWidth(r rune) int {
	switch {
	case r < 0x20 || r == 0x7f:
		return 0
	case r < 0x300:
		return 1
	case 0x1160 <= r && r <= 0x11ff: // Hangul vowels and finals
		return 0
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// safe returns b as termsafe.Text shows it. Render's text is safe
// already; this keeps what the parser makes of it so too.
func safe(b []byte) string { return termsafe.Text(string(b)) }

// unescape returns text from the source as it shows: backslash escapes
// undone and character references decoded, except a reference to a
// character termsafe would make visible (&#27; is ESC, &lrm; a bidi
// mark), which shows as written: the text was made safe before it was
// parsed, and a reply could spell an escape sequence as "&#27;[2J".
func unescape(b []byte) string {
	s := safe(b)
	if !strings.ContainsAny(s, `\&`) {
		return s
	}
	var out strings.Builder
	out.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' && i+1 < len(s) && isPunct(s[i+1]) {
			out.WriteByte(s[i+1])
			i += 2
			continue
		}
		if c == '&' {
			if n, dec := charRef(s[i:]); n > 0 && termsafe.Safe(dec, true) {
				out.WriteString(dec)
				i += n
				continue
			}
		}
		out.WriteByte(c)
		i++
	}
	return out.String()
}

// charRef returns the length of the character reference at the start of
// s (which begins with '&') and what it stands for, or 0: "&name;", an
// HTML5 entity, "&#" and 1-7 digits, or "&#x" and 1-6 hex digits, then
// ';', as CommonMark has them.
func charRef(s string) (int, string) {
	semi := strings.IndexByte(s[:min(len(s), 34)], ';')
	if semi < 2 {
		return 0, ""
	}
	body := s[1:semi]
	if body[0] != '#' {
		for i := 0; i < len(body); i++ {
			if !isDigit(body[i]) && !isLetter(body[i]) {
				return 0, ""
			}
		}
		if e, ok := util.LookUpHTML5EntityByName(body); ok {
			return semi + 1, string(e.Characters)
		}
		return 0, ""
	}
	digits, base, most := body[1:], 10, 7
	if digits != "" && (digits[0] == 'x' || digits[0] == 'X') {
		digits, base, most = digits[1:], 16, 6
	}
	if digits == "" || len(digits) > most {
		return 0, ""
	}
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil {
		return 0, ""
	}
	r := rune(v)
	if r == 0 || !utf8.ValidRune(r) {
		r = utf8.RuneError
	}
	return semi + 1, string(r)
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

func isPunct(c byte) bool {
	return '!' <= c && c <= '/' || ':' <= c && c <= '@' || '[' <= c && c <= '`' || '{' <= c && c <= '~'
}

// strikeParser parses "~~strike-through~~" (two tildes: one is too often
// "about", as in ~5 minutes).
type strikeParser struct{}

var kindStrike = ast.NewNodeKind("Strikethrough")

type strikeNode struct{ ast.BaseInline }

func (n *strikeNode) Kind() ast.NodeKind                 { return kindStrike }
func (n *strikeNode) Dump(src []byte, level int)         { ast.DumpHelper(n, src, level, nil, nil) }
func (strikeParser) Trigger() []byte                     { return []byte{'~'} }
func (strikeParser) CloseBlock(ast.Node, parser.Context) {}
func (strikeParser) IsDelimiter(b byte) bool             { return b == '~' }

func (strikeParser) CanOpenCloser(opener, closer *parser.Delimiter) bool {
	return opener.Char == closer.Char
}

func (strikeParser) OnMatch(int) ast.Node { return &strikeNode{} }

func (p strikeParser) Parse(parent ast.Node, block gtext.Reader, pc parser.Context) ast.Node {
	before := block.PrecendingCharacter()
	line, seg := block.PeekLine()
	d := parser.ScanDelimiter(line, before, 2, p)
	if d == nil || d.OriginalLength != 2 || before == '~' {
		return nil
	}
	d.Segment = seg.WithStop(seg.Start + d.OriginalLength)
	block.Advance(d.OriginalLength)
	pc.PushDelimiter(d)
	return d
}

// tableParser makes a paragraph that holds a GitHub table, a row of cells
// between pipes, a delimiter row ("|---|:-:|") and more rows, into a
// tableNode from that row on. Its rows' cells are blocks whose inline
// markdown the parser goes on to parse.
type tableParser struct{}

type align uint8

const (
	alignLeft align = iota
	alignCenter
	alignRight
)

var (
	kindTable = ast.NewNodeKind("Table")
	kindRow   = ast.NewNodeKind("TableRow")
	kindCell  = ast.NewNodeKind("TableCell")
)

type tableNode struct {
	ast.BaseBlock
	aligns []align
	source gtext.Segments // the table's lines as written
}

type rowNode struct{ ast.BaseBlock }

type cellNode struct{ ast.BaseBlock }

func (n *tableNode) Kind() ast.NodeKind         { return kindTable }
func (n *tableNode) Dump(src []byte, level int) { ast.DumpHelper(n, src, level, nil, nil) }
func (n *rowNode) Kind() ast.NodeKind           { return kindRow }
func (n *rowNode) Dump(src []byte, level int)   { ast.DumpHelper(n, src, level, nil, nil) }
func (n *cellNode) Kind() ast.NodeKind          { return kindCell }
func (n *cellNode) Dump(src []byte, level int)  { ast.DumpHelper(n, src, level, nil, nil) }

func (tableParser) Transform(p *ast.Paragraph, reader gtext.Reader, pc parser.Context) {
	src := reader.Source()
	lines := p.Lines()
	for i := 1; i < lines.Len(); i++ {
		delim := lines.At(i)
		aligns := delimiterRow(delim.Value(src))
		if aligns == nil {
			continue
		}
		if len(tableCells(lines.At(i-1), src)) != len(aligns) {
			return
		}
		t := &tableNode{aligns: aligns}
		for j := i - 1; j < lines.Len(); j++ {
			if j == i {
				continue
			}
			row := &rowNode{}
			cells := tableCells(lines.At(j), src)
			for k := range aligns {
				cell := &cellNode{}
				if k < len(cells) && cells[k].Len() > 0 {
					cell.Lines().Append(cells[k])
				}
				row.AppendChild(row, cell)
			}
			t.AppendChild(t, row)
		}
		for j := i - 1; j < lines.Len(); j++ {
			t.source.Append(lines.At(j))
		}
		parent := p.Parent()
		parent.InsertAfter(parent, p, t)
		if i == 1 {
			parent.RemoveChild(parent, p)
			return
		}
		p.Lines().SetSliced(0, i-1)
		return
	}
}

// tableCells returns the cells of the table row line: the text between
// pipes not escaped as \|, with a leading and a trailing pipe optional,
// trimmed.
func tableCells(line gtext.Segment, src []byte) []gtext.Segment {
	var cells []gtext.Segment
	for _, c := range splitRow(src[line.Start:line.Stop]) {
		cells = append(cells, gtext.NewSegment(line.Start+c[0], line.Start+c[1]))
	}
	return cells
}

// splitRow returns where the cells of the table row line start and end.
func splitRow(line []byte) [][2]int {
	start, stop := 0, len(line)
	for start < stop && isBlank(line[start]) {
		start++
	}
	for stop > start && isBlank(line[stop-1]) {
		stop--
	}
	if start < stop && line[start] == '|' {
		start++
	}
	if stop > start && line[stop-1] == '|' && (stop-2 < start || line[stop-2] != '\\') {
		stop--
	}
	var cells [][2]int
	cell := func(a, b int) {
		for a < b && isBlank(line[a]) {
			a++
		}
		for b > a && isBlank(line[b-1]) {
			b--
		}
		cells = append(cells, [2]int{a, b})
	}
	from := start
	for i := start; i < stop; i++ {
		switch line[i] {
		case '\\':
			i++
		case '|':
			cell(from, i)
			from = i + 1
		}
	}
	cell(from, stop)
	return cells
}

// delimiterRow returns the alignments of the columns of a table's
// delimiter row, cells of dashes with an optional colon at either end
// between pipes, or nil if line is not one.
func delimiterRow(line []byte) []align {
	if !bytes.Contains(line, []byte{'|'}) {
		return nil
	}
	var aligns []align
	for _, c := range splitRow(line) {
		cell := string(line[c[0]:c[1]])
		left, right := strings.HasPrefix(cell, ":"), strings.HasSuffix(cell, ":")
		dashes := strings.TrimSuffix(strings.TrimPrefix(cell, ":"), ":")
		if dashes == "" || strings.Trim(dashes, "-") != "" {
			return nil
		}
		switch {
		case left && right:
			aligns = append(aligns, alignCenter)
		case right:
			aligns = append(aligns, alignRight)
		default:
			aligns = append(aligns, alignLeft)
		}
	}
	return aligns
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

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
