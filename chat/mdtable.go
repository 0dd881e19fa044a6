package chat

import (
	"bytes"
	"slices"
	"strings"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	gtext "github.com/yuin/goldmark/text"
)

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
