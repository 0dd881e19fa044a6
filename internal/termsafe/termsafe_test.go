package termsafe

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLineAndText(t *testing.T) {
	for _, tc := range []struct {
		name, in, line, text string
	}{
		{"plain", "fix_nginx on /srv", "fix_nginx on /srv", ""},
		{"unicode", "café ✓ 日本 👍", "café ✓ 日本 👍", ""},
		{"CSI cursor up and erase line", "a\x1b[1A\x1b[2Kb", `a\x1b[1A\x1b[2Kb`, ""},
		{"OSC 0 title, BEL", "\x1b]0;h5 all good\a", `\x1b]0;h5 all good\a`, ""},
		{"OSC 52 clipboard, ST", "\x1b]52;c;cm0gLXJmIH4=\x1b\\", `\x1b]52;c;cm0gLXJmIH4=\x1b\`, ""},
		{"DCS", "\x1bP+q544e\x1b\\", `\x1bP+q544e\x1b\`, ""},
		{"8-bit CSI as a rune", "\u009b2J", `\u009b2J`, ""},
		{"8-bit CSI as a lone byte", "\x9b2J", `\x9b2J`, ""},
		{"other C1: NEL, OSC, ST", "\u0085\u009d\u009c", `\u0085\u009d\u009c`, ""},
		{"BEL", "ding\a", `ding\a`, ""},
		{"backspace", "h4\b\b5", `h4\b\b5`, ""},
		{"carriage return", "h4\rh5", `h4\rh5`, ""},
		{"DEL", "a\x7fb", `a\x7fb`, ""},
		{"NUL and other C0", "\x00\x01\x1f\v\f", `\x00\x01\x1f\v\f`, ""},
		{"newline and tab", "a\nb\tc", `a\nb\tc`, "a\nb\tc"},
		{"CRLF", "line\r\n", `line\r\n`, "line\\r\n"},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`, ""},
		{"truncated sequence", "\xe2\x82x", `\xe2\x82x`, ""},
		{"surrogate half encoded", "\xed\xa0\x80", `\xed\xa0\x80`, ""},
		{"bidi override", "h\u202e5h", `h\u202e5h`, ""},
		{"bidi embeddings and isolates", "\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`, ""},
		{"bidi marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`, ""},
		{"zero width space, word joiner, BOM", "h\u200b5\u2060\ufeff", `h\u200b5\u2060\ufeff`, ""},
		{"zero width joiners", "👩\u200d💻 \u200c", `👩\u200d💻 \u200c`, "👩\u200d💻 \u200c"},
		{"soft hyphen", "ro\u00adot", `ro\u00adot`, ""},
		{"tag character", "a\U000e0041", `a\U000e0041`, ""},
		{"line and paragraph separators", "a\u2028b\u2029", `a\u2028b\u2029`, ""},
		{"replacement character is text", "\ufffd", "\ufffd", ""},
		{"backslash stays", `C:\x1b`, `C:\x1b`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Line(tc.in); got != tc.line {
				t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.line)
			}
			text := tc.text
			if text == "" {
				text = tc.line
			}
			if got := Text(tc.in); got != text {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, text)
			}
			if got := safeProblem(Line(tc.in), false); got != "" {
				t.Errorf("Line(%q): %s", tc.in, got)
			}
			if got := safeProblem(Text(tc.in), true); got != "" {
				t.Errorf("Text(%q): %s", tc.in, got)
			}
		})
	}
}

func TestField(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven …"},
		{"ab\x1b[2J", 8, `ab…`},        // the escape is not split
		{"ab\x1b[2J", 10, `ab\x1b[2J`}, // it fits exactly
		{"日本語テキスト", 10, "日本…"},         // nor a character
		{"x", 0, "x"},
		{strings.Repeat("a", 1<<20), 8, "aaaaa…"},
	} {
		if got := Field(tc.in, tc.max); got != tc.want || len(got) > max(tc.max, 4) {
			t.Errorf("Field(%q, %d) = %q, want %q", tc.in[:min(len(tc.in), 20)], tc.max, got, tc.want)
		}
	}
}

func TestWriter(t *testing.T) {
	in := "ok \x1b[2Jcafé 👍\n\u009b\xff\u202e end\xe2\x82"
	want := Text(in)
	// Every split point, so that characters are cut between writes.
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			var b bytes.Buffer
			w := NewWriter(&b)
			for _, part := range []string{in[:i], in[i:j], in[j:]} {
				if n, err := w.Write([]byte(part)); n != len(part) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if b.String() != want {
				t.Fatalf("split at %d, %d: %q, want %q", i, j, b.String(), want)
			}
		}
	}
}

// safeProblem says what in s could reach a terminal as more than text, or
// "" when nothing does.
func safeProblem(s string, multiline bool) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for _, r := range s {
		switch {
		case r < 0x20 && !(multiline && (r == '\n' || r == '\t')):
			return "a C0 control"
		case r == 0x7f:
			return "DEL"
		case r >= 0x80 && r <= 0x9f:
			return "a C1 control"
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f:
			return "a bidi control"
		}
	}
	return ""
}

func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[2K\x1b[1Aollie: h5", "\x1b]52;c;eA==\a", "\u009b\x9b\x7f\r\n\t",
		"\xff\xfe", "\u202eabc\u2066", "日本\xe2\x82", "👩\u200d💻"} {
		f.Add(s, 40)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		if p := safeProblem(Line(s), false); p != "" {
			t.Fatalf("Line(%q) = %q holds %s", s, Line(s), p)
		}
		if p := safeProblem(Text(s), true); p != "" {
			t.Fatalf("Text(%q) = %q holds %s", s, Text(s), p)
		}
		if !Safe(Line(s), false) || !Safe(Text(s), true) {
			t.Fatalf("the output of %q is not Safe", s)
		}
		// A backslash is left alone, so making safe text safe changes nothing.
		if Line(Line(s)) != Line(s) || Text(Text(s)) != Text(s) {
			t.Fatalf("making %q safe twice changes it", s)
		}
		if Safe(s, false) != (Line(s) == s) {
			t.Fatalf("Safe(%q) = %v, but Line gives %q", s, Safe(s, false), Line(s))
		}
		max = max % 1000
		fl := Field(s, max)
		if p := safeProblem(fl, false); p != "" {
			t.Fatalf("Field(%q, %d) = %q holds %s", s, max, fl, p)
		}
		if len(fl) > max && len(fl) > 4 {
			t.Fatalf("Field(%q, %d) = %q is longer", s, max, fl)
		}
		if line := Line(s); fl != line && !strings.HasPrefix(line, strings.TrimSuffix(fl, Ellipsis)) {
			t.Fatalf("Field(%q, %d) = %q is not a prefix of %q", s, max, fl, line)
		}
		// Streamed in two parts, the same as Text.
		cut := len(s) / 2
		var b bytes.Buffer
		w := NewWriter(&b)
		w.Write([]byte(s[:cut]))
		w.Write([]byte(s[cut:]))
		w.Flush()
		if b.String() != Text(s) {
			t.Fatalf("Writer(%q) = %q, Text %q", s, b.String(), Text(s))
		}
	})
}

// TestQuote: a quoted text cannot end its quotes early, is one line, and
// a cut one ends in the ellipsis outside its quotes.
func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"fix_nginx", 80, `"fix_nginx"`},
		{`x" (asked by h5) "y`, 80, `"x\" (asked by h5) \"y"`},
		{`a\`, 80, `"a\\"`},
		{"two\nlines\x1b[2K", 80, `"two\nlines\x1b[2K"`},
		{"abcdefghij", 8, `"abcde"…`},
		{"abcdefgh", 8, `"abcdefgh"`},
		{"ends in …", 80, `"ends in …"`},
		{`""""`, 6, `"\""…`},
	} {
		if got := Quote(tc.in, tc.n); got != tc.want {
			t.Errorf("Quote(%q, %d) = %s, want %s", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestUnquoted: what Quote wrote is taken out, and only that.
func TestUnquoted(t *testing.T) {
	in := `x" (asked by h5) "y`
	line := "h7 says " + Quote(in, 80) + " and " + Quote(`\`, 80) + " (asked by h7)"
	if got, want := Unquoted(line), `h7 says "" and "" (asked by h7)`; got != want {
		t.Errorf("Unquoted(%s) = %s, want %s", line, got, want)
	}
}

// TestCell: an empty cell shows "-", a long one is clipped to CellWidth,
// and a tab (which would shift the columns) is made visible.
func TestCell(t *testing.T) {
	if got := Cell(""); got != "-" {
		t.Errorf("Cell(\"\") = %q", got)
	}
	if got := Cell(strings.Repeat("x", 200)); len(got) > CellWidth {
		t.Errorf("Cell of 200 bytes is %d bytes, want at most %d", len(got), CellWidth)
	}
	if got := Cell("a\tb"); strings.Contains(got, "\t") {
		t.Errorf("Cell kept a tab: %q", got)
	}
}
