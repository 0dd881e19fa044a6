package chat

import (
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/yuin/goldmark/parser"
	gtext "github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
	"golang.org/x/term"
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
// and ~~strike-through~~ as mdtable.go and mdinline.go parse them
// (goldmark's extension package compiles a dozen regular expressions when
// the binary starts, 1.1 ms that every tool call, a start of the binary,
// would pay). It is made on first use, not at start.
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
