// Package termsafe makes text that someone else chose safe to show on the
// desktop: before a host's bytes reach a terminal, a dialog or an askpass,
// every character that could act rather than be read is replaced by a
// visible escape, so a host can neither move the cursor, erase a line, set
// the title, write the clipboard, nor make its text look like ollie's own.
//
// It trusts nothing in its input: any bytes, valid UTF-8 or not. It trusts
// its caller to say what the text is: a one-line field (Line, Field), where
// a newline would start a line the host wrote, or multi-line output (Text,
// Writer), where newlines and tabs are kept. What the caller writes around
// the safe text (labels, the host name the desktop knows from its SSH
// connection) is the caller's.
//
// Made visible, as Go's strconv.Quote writes them (\a \b \t \n \v \f \r,
// else \xNN below U+0080, \uNNNN, \UNNNNNNNN):
//
//   - C0 controls (U+0000–U+001F), in Text all but \n and \t: ESC begins
//     every CSI, OSC and DCS sequence, BEL and backspace and CR rewrite
//     what is shown;
//   - DEL (U+007F);
//   - C1 controls (U+0080–U+009F), U+009B (an 8-bit CSI) among them;
//   - bytes that are not UTF-8, as \xNN (\x9b is a lone byte, \u009b the
//     encoded rune: a terminal in an 8-bit mode reads either as CSI);
//   - format characters (Unicode category Cf): the bidi embeddings,
//     overrides and isolates (U+202A–U+202E, U+2066–U+2069) and marks
//     (U+200E, U+200F, U+061C) that reorder a line so it reads as something
//     else, zero-width spaces and joiners (U+200B, U+2060, U+FEFF) that hide
//     a difference between two names, the soft hyphen and tag characters.
//     Text keeps the zero-width joiner and non-joiner (U+200D, U+200C),
//     which emoji and several scripts need; Line makes them visible too;
//   - the line and paragraph separators U+2028 and U+2029.
//
// A backslash is left as it is: the escapes are for a person to read, not
// to be decoded, and a literal "\x1b" a host sends is as harmless as the
// escape of a real ESC. Quote is the exception: it shows text as the words
// of whoever chose it, between double quotes, so a quote or a backslash in
// the text is escaped too and the text cannot end its quotes early.
package termsafe

import (
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line returns s for a one-line field (a name, a path, an error message):
// every control character, newlines and tabs included, made visible.
func Line(s string) string { q, _ := clean(s, false, false, -1); return q }

// Text returns s for multi-line output (a file's content): as Line, but
// newlines and tabs are kept.
func Text(s string) string { q, _ := clean(s, true, false, -1); return q }

// Field returns Line(s) cut to at most n bytes, never inside an escape or
// a character, and ending in "…" when it was cut (the "…" is counted in
// n). n below 4 is taken as 4.
func Field(s string, n int) string { q, _ := clean(s, false, false, max(n, 4)); return q }

// CellWidth bounds a table cell whose text another host chose.
const CellWidth = 64

// Cell is a table cell whose text another host chose: Field(s,
// CellWidth), or "-" when s is empty, so that a column never looks
// shifted.
func Cell(s string) string {
	if s == "" {
		return "-"
	}
	return Field(s, CellWidth)
}

// Ellipsis ends a Field that was cut.
const Ellipsis = "…"

// Quote returns s for a one-line field shown as someone else's words: as
// Field(s, n), with a double quote and a backslash escaped (\" and \\),
// between double quotes. A text that was cut ends with its closing quote
// followed by Ellipsis, outside the quotes, so the quotes hold nothing
// that s did not say. Text the caller writes around it stays the caller's:
// nothing in s can close the quotes and speak after them.
func Quote(s string, n int) string {
	q, cut := clean(s, false, true, max(n, 4))
	if cut {
		return `"` + strings.TrimSuffix(q, Ellipsis) + `"` + Ellipsis
	}
	return `"` + q + `"`
}

// Unquoted returns s without what Quote put between quotes: each quoted
// span, escapes and all, becomes "" and the Ellipsis of a cut one stays.
// It is what of a line is not another's words, for checking that a name
// appears only where the caller wrote it.
func Unquoted(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString(`""`)
		for i++; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
		}
	}
	return b.String()
}

// Safe reports whether s is shown as it is by Line (multiline false) or
// Text (multiline true).
func Safe(s string, multiline bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			if !multiline || (c != '\n' && c != '\t') {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if n == 1 || hidden(r, multiline) {
			return false
		}
		i += n
	}
	return true
}

// clean escapes s to at most limit bytes; limit < 0 means no limit. quote
// escapes double quotes and backslashes too. cut reports that the text
// was cut (and ends in Ellipsis).
func clean(s string, multiline, quote bool, limit int) (q string, cut bool) {
	if !quote || !strings.ContainsAny(s, `"\`) {
		if Safe(s, multiline) && (limit < 0 || len(s) <= limit) {
			return s, false
		}
	}
	var out []byte
	if limit < 0 {
		out = make([]byte, 0, len(s)+16)
	} else {
		out = make([]byte, 0, min(len(s), limit)+len(Ellipsis))
	}
	var esc [16]byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		piece := s[i : i+n]
		switch {
		case n == 1 && r == utf8.RuneError:
			piece = string(appendByteEscape(esc[:0], s[i]))
		case r < utf8.RuneSelf && (r < 0x20 || r == 0x7f) && !(multiline && (r == '\n' || r == '\t')):
			piece = string(appendRuneEscape(esc[:0], r))
		case r >= utf8.RuneSelf && hidden(r, multiline):
			piece = string(appendRuneEscape(esc[:0], r))
		case quote && (r == '"' || r == '\\'):
			piece = string([]byte{'\\', byte(r)})
		}
		if limit >= 0 && len(out)+len(piece) > limit-len(Ellipsis) && !fitsRest(s[i:], multiline, quote, limit-len(out)) {
			return string(append(out, Ellipsis...)), true
		}
		out = append(out, piece...)
		i += n
	}
	return string(out), false
}

// fitsRest reports whether the rest of the text, escaped, fits in room
// bytes, so that a text exactly as long as the limit is not cut for its
// ellipsis.
func fitsRest(rest string, multiline, quote bool, room int) bool {
	if len(rest) > room { // escaping never shortens
		return false
	}
	q, _ := clean(rest, multiline, quote, -1)
	return len(q) <= room
}

// hidden reports whether a rune at or above U+0080 is made visible.
func hidden(r rune, multiline bool) bool {
	switch {
	case r <= 0x9f: // C1
		return true
	case r == 0x2028 || r == 0x2029:
		return true
	case multiline && (r == 0x200c || r == 0x200d):
		return false
	}
	return unicode.Is(unicode.Cf, r)
}

func appendRuneEscape(b []byte, r rune) []byte {
	switch r {
	case '\a':
		return append(b, `\a`...)
	case '\b':
		return append(b, `\b`...)
	case '\f':
		return append(b, `\f`...)
	case '\n':
		return append(b, `\n`...)
	case '\r':
		return append(b, `\r`...)
	case '\t':
		return append(b, `\t`...)
	case '\v':
		return append(b, `\v`...)
	}
	switch {
	case r < utf8.RuneSelf:
		return appendByteEscape(b, byte(r))
	case r <= 0xffff:
		return appendHex(append(b, `\u`...), uint64(r), 4)
	}
	return appendHex(append(b, `\U`...), uint64(r), 8)
}

func appendByteEscape(b []byte, c byte) []byte {
	return appendHex(append(b, `\x`...), uint64(c), 2)
}

func appendHex(b []byte, v uint64, digits int) []byte {
	h := strconv.FormatUint(v, 16)
	for i := len(h); i < digits; i++ {
		b = append(b, '0')
	}
	return append(b, h...)
}

// Writer passes what is written to it on as Text would show it, for output
// that streams (a file followed as it grows). A character split between
// two writes is held back until it is whole; Flush writes what is held
// back at the end of the stream.
type Writer struct {
	w    io.Writer
	held [utf8.UTFMax - 1]byte
	nh   int
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes Text(p) to the underlying writer, except for an incomplete
// character at p's end, held for the next Write. It returns len(p) when the
// underlying writer took everything.
func (w *Writer) Write(p []byte) (int, error) {
	buf := p
	if w.nh > 0 {
		buf = append(append(make([]byte, 0, w.nh+len(p)), w.held[:w.nh]...), p...)
		w.nh = 0
	}
	// Hold back an incomplete but possibly valid character at the end.
	for k := 1; k < utf8.UTFMax && k <= len(buf); k++ {
		tail := buf[len(buf)-k:]
		if !utf8.RuneStart(tail[0]) {
			continue
		}
		if !utf8.FullRune(tail) {
			w.nh = copy(w.held[:], tail)
			buf = buf[:len(buf)-k]
		}
		break
	}
	if len(buf) == 0 {
		return len(p), nil
	}
	if _, err := io.WriteString(w.w, Text(string(buf))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a character left incomplete at the end of the stream, as
// the bytes it is (\xNN).
func (w *Writer) Flush() error {
	if w.nh == 0 {
		return nil
	}
	s := Text(string(w.held[:w.nh]))
	w.nh = 0
	_, err := io.WriteString(w.w, s)
	return err
}
