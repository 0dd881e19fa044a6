package chat

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// vtScreen is what a terminal of rows × cols shows after out: the subset
// of a VT100 that ollie chat and x/term's line editor write (printable
// text with the wrap deferred to the next character, CR, LF, BS, cursor
// moves CUU/CUD/CUF/CUB/CHA/CUP, erase ED and EL; SGR and modes ignored),
// scrolling at the bottom. Tests read the screen as a person sees it,
// not the bytes that drew it.
func vtScreen(out string, rows, cols int) []string {
	scr := make([][]rune, rows)
	blank := func() []rune { return []rune(strings.Repeat(" ", cols)) }
	for i := range scr {
		scr[i] = blank()
	}
	r, c, pending := 0, 0, false
	down := func() {
		if r == rows-1 {
			scr = append(scr[1:], blank())
		} else {
			r++
		}
	}
	for i := 0; i < len(out); {
		ch, size := utf8.DecodeRuneInString(out[i:])
		switch {
		case ch == '\x1b' && i+1 < len(out) && out[i+1] == '[':
			j := i + 2
			for j < len(out) && (out[j] >= '0' && out[j] <= '9' || out[j] == ';' || out[j] == '?') {
				j++
			}
			if j >= len(out) {
				return screenLines(scr)
			}
			params, final := out[i+2:j], out[j]
			n := 1
			if p, err := strconv.Atoi(strings.TrimPrefix(params, "?")); err == nil {
				n = p
			}
			switch final {
			case 'A':
				r, pending = max(r-max(n, 1), 0), false
			case 'B':
				r, pending = min(r+max(n, 1), rows-1), false
			case 'C':
				c, pending = min(c+max(n, 1), cols-1), false
			case 'D':
				c, pending = max(c-max(n, 1), 0), false
			case 'G':
				c, pending = min(max(n, 1)-1, cols-1), false
			case 'H':
				row, col, _ := strings.Cut(params, ";")
				rr, _ := strconv.Atoi(row)
				cc, _ := strconv.Atoi(col)
				r, c, pending = min(max(rr, 1)-1, rows-1), min(max(cc, 1)-1, cols-1), false
			case 'J':
				if params == "" || params == "0" {
					for k := c; k < cols; k++ {
						scr[r][k] = ' '
					}
					for k := r + 1; k < rows; k++ {
						scr[k] = blank()
					}
				} else if params == "2" {
					for k := range scr {
						scr[k] = blank()
					}
				}
			case 'K':
				if params == "" || params == "0" {
					for k := c; k < cols; k++ {
						scr[r][k] = ' '
					}
				}
			}
			i = j + 1
			continue
		case ch == '\x1b':
			i += 2 // a two-byte escape: none matters here
			continue
		case ch == '\r':
			c, pending = 0, false
		case ch == '\n':
			down()
			pending = false
		case ch == '\b':
			c, pending = max(c-1, 0), false
		case ch < 0x20 || ch == 0x7f:
		default:
			if pending {
				c, pending = 0, false
				down()
			}
			scr[r][c] = ch
			if c == cols-1 {
				pending = true
			} else {
				c++
			}
		}
		i += size
	}
	return screenLines(scr)
}

func screenLines(scr [][]rune) []string {
	lines := make([]string, len(scr))
	for i, l := range scr {
		lines[i] = strings.TrimRight(string(l), " ")
	}
	return lines
}
