package chat

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

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
