package chat

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	gtext "github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"ollie/internal/termsafe"
)

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
