package chat

import (
	"strconv"
	"strings"

	"github.com/yuin/goldmark/ast"
	gtext "github.com/yuin/goldmark/text"
)

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
