package chat

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/internal/await"
	"ollie/internal/termsafe"
)

// sgrRE matches one SGR sequence, the only escape Render's output may hold.
var sgrRE = regexp.MustCompile("\x1b\\[[0-9;:]*m")

func plain(s string) string { return sgrRE.ReplaceAllString(s, "") }

// checkRendered checks what every styled Render must give: escapes that
// are colour codes only, no trailing spaces, no blank lines around, exactly
// one newline at the end, and lines within the width.
func checkRendered(t *testing.T, out string, width int) {
	t.Helper()
	if !termsafe.Safe(plain(out), true) {
		t.Errorf("output holds an escape that is not a colour code: %q", out)
	}
	if !strings.HasSuffix(out, "\n") || strings.HasSuffix(out, "\n\n") {
		t.Errorf("output does not end with exactly one newline: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if strings.TrimSpace(plain(lines[0])) == "" {
		t.Errorf("output starts with a blank line: %q", out)
	}
	for _, line := range lines {
		if p := plain(line); strings.TrimRight(p, " \t") != p {
			t.Errorf("line ends in spaces: %q", line)
		}
		if w := strWidth(plain(line)); w > width {
			t.Errorf("line is %d columns, wider than %d: %q", w, width, plain(line))
		}
	}
}

func TestRenderStyled(t *testing.T) {
	in := "# Title\n\nSome **bold** words and `a span`.\n\n```go\nfunc main() {}\n```\n\n- one\n- two\n"
	out := NewMarkdown(true, 60).Render(in)
	checkRendered(t, out, 60)
	if !sgrRE.MatchString(out) {
		t.Errorf("no colour codes in %q", out)
	}
	p := plain(out)
	for _, gone := range []string{"#", "**", "`"} {
		if strings.Contains(p, gone) {
			t.Errorf("markdown %q left in the output:\n%s", gone, p)
		}
	}
	for _, word := range []string{"Title", "Some", "bold", "words", "a span", "func main() {}", "one", "two"} {
		if !strings.Contains(p, word) {
			t.Errorf("%q missing from the output:\n%s", word, p)
		}
	}
}

// TestRenderWraps: lines are wrapped to the width, without trailing
// spaces, and nothing fails at widths too small to be useful.
func TestRenderWraps(t *testing.T) {
	in := "# A heading\n\nA paragraph long enough to be wrapped several times over at forty columns, with a [link](https://example.com/a/path) in it.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quoted\n"
	out := NewMarkdown(true, 40).Render(in)
	checkRendered(t, out, 40)
	if first, _, _ := strings.Cut(out, "\n"); first != "\x1b[0;1;4mA heading\x1b[0m" {
		t.Errorf("heading not bold and underlined on a line of its own: %q", out)
	}
	for _, w := range []int{1, 2, 5, 10} {
		out := NewMarkdown(true, w).Render(in)
		if !strings.HasSuffix(out, "\n") || !strings.Contains(strings.Join(strings.Fields(plain(out)), ""), "Aheading") {
			t.Errorf("width %d: %q", w, out)
		}
	}
}

// reply is a representative reply, and replyShown how it shows, at 40
// columns, colours aside.
const (
	reply = "# Release notes\n\n" +
		"The build **passed** with *one* warning in `go vet`, see ~~old~~ new log.\n\n" +
		"- first item\n- second item\n  - nested item\n- third item\n\n" +
		"1. Build\n2. Test\n\n" +
		"```go\nfunc main() {\n\tfmt.Println(\"hi\")   \n}\n```\n\n" +
		"> Quoted text\n> on two lines.\n\n" +
		"See [the docs](https://example.com/docs).\n\n" +
		"| Name | Size |\n|------|-----:|\n| a.go | 12 |\n| long_name.go | 1234 |\n"
	replyShown = "Release notes\n" +
		"\n" +
		"The build passed with one warning in go\n" +
		"vet, see old new log.\n" +
		"\n" +
		"• first item\n" +
		"• second item\n" +
		"  • nested item\n" +
		"• third item\n" +
		"\n" +
		"1. Build\n" +
		"2. Test\n" +
		"\n" +
		"  func main() {\n" +
		"  \tfmt.Println(\"hi\")\n" +
		"  }\n" +
		"\n" +
		"│ Quoted text on two lines.\n" +
		"\n" +
		"See the docs (https://example.com/docs).\n" +
		"\n" +
		"Name         │ Size\n" +
		"─────────────┼─────\n" +
		"a.go         │   12\n" +
		"long_name.go │ 1234\n"
)

// TestRenderReply: what a representative reply shows, and in which
// colours.
func TestRenderReply(t *testing.T) {
	out := NewMarkdown(true, 40).Render(reply)
	checkRendered(t, out, 40)
	if p := plain(out); p != replyShown {
		t.Errorf("shows\n%s\nwant\n%s", p, replyShown)
	}
	lines := strings.Split(out, "\n")
	for _, want := range []struct{ line, code string }{
		{"Release notes", "\x1b[0;1;4mRelease notes\x1b[0m"},                             // level 1: bold, underlined
		{"The build passed", "\x1b[0;1mpassed\x1b[0m"},                                   // strong
		{"The build passed", "\x1b[0;3mone\x1b[0m"},                                      // emphasis
		{"The build passed", "\x1b[0;36mgo\x1b[0m"},                                      // a code span, wrapped:
		{"vet, see", "\x1b[0;36mvet\x1b[0m"},                                             // each line in its colour
		{"vet, see", "\x1b[0;9mold\x1b[0m"},                                              // strike-through
		{"  func main", "  \x1b[0;36mfunc main() {\x1b[0m"},                              // a code block
		{"  \tfmt", "  \x1b[0;36m\tfmt.Println(\"hi\")\x1b[0m"},                          // as written, trailing spaces off
		{"│ Quoted", "\x1b[0;2m│\x1b[0m Quoted text"},                                    // a faint bar
		{"See the docs", "(\x1b[0;2mhttps://example.com/docs\x1b[0m)"},                   // a faint url
		{"Name ", "\x1b[0;1mName\x1b[0m         \x1b[0;2m│\x1b[0m \x1b[0;1mSize\x1b[0m"}, // a bold header
		{"──", "\x1b[0;2m─────────────┼─────\x1b[0m"},
		{"a.go", "a.go         \x1b[0;2m│\x1b[0m   12"}, // right-aligned
	} {
		found := false
		for _, line := range lines {
			if strings.HasPrefix(plain(line), want.line) {
				found = true
				if !strings.Contains(line, want.code) {
					t.Errorf("line %q lacks %q", line, want.code)
				}
			}
		}
		if !found {
			t.Errorf("no line starts %q", want.line)
		}
	}
	if strings.Contains(out, "\x1b]8;") {
		t.Error("a hyperlink (OSC 8) in the output")
	}
}

// TestRenderShows: how single constructs show, colours aside.
func TestRenderShows(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		width    int
		want     string
	}{
		{"setext heading", "Title\n=====\n\ntext", 40, "Title\n\ntext\n"},
		{"hard break", "one  \ntwo\\\nthree\nfour", 40, "one\ntwo\nthree four\n"},
		{"wrap", "aaa bbb ccc ddd", 7, "aaa bbb\nccc ddd\n"},
		{"long word", "a " + strings.Repeat("x", 12) + " b", 5, "a\nxxxxx\nxxxxx\nxx b\n"},
		{"wide characters", "日本語の 文章です", 8, "日本語の\n文章です\n"},
		{"wide word", "日本語の文章です", 5, "日本\n語の\n文章\nです\n"},
		{"combining marks", "e\u0301e\u0301 e\u0301e\u0301", 2, "e\u0301e\u0301\ne\u0301e\u0301\n"},
		{"spaces", "a    b\n\n`a    b`", 40, "a b\n\na    b\n"},
		{"one tilde", "~5 minutes, ~10 at most", 40, "~5 minutes, ~10 at most\n"},
		{"three tildes", "a ~~~x~~~ b", 40, "a ~~~x~~~ b\n"},
		{"escapes", `\*not\* \# \[x\]`, 40, "*not* # [x]\n"},
		{"references", "&copy; &#65;&#x42; &nosuch; &amp", 40, "© AB &nosuch; &amp\n"},
		{"link as its url", "[https://a.b/c](https://a.b/c) and <https://d.e>", 40, "https://a.b/c and https://d.e\n"},
		{"email", "<me@example.com>", 40, "me@example.com\n"},
		{"reference link", "[text][r]\n\n[r]: https://a.b \"title\"", 40, "text (https://a.b)\n"},
		{"image", "![a cat](cat.png)", 40, "a cat (cat.png)\n"},
		{"raw html", "<b>bold</b> <!-- c -->\n\n<div>\n  <p>x</p>\n</div>", 40, "<b>bold</b> <!-- c -->\n\n<div>\n  <p>x</p>\n</div>\n"},
		{"rule", "a\n\n---\n\nb", 5, "a\n\n─────\n\nb\n"},
		{"ordered from 9", "9. nine\n10. ten", 40, " 9. nine\n10. ten\n"},
		{"ordered parens", "1) one\n2) two", 40, "1) one\n2) two\n"},
		{"loose list", "- a\n\n- b\n\n  more", 40, "• a\n\n• b\n\n  more\n"},
		{"list wrap", "- aaa bbb ccc", 9, "• aaa bbb\n  ccc\n"},
		{"empty item", "- \n- b", 40, "•\n• b\n"},
		{"item with code", "- a\n\n  ```\n  x\n  ```", 40, "• a\n\n    x\n"},
		{"nested quote", "> a\n>\n> > b", 40, "│ a\n│\n│ │ b\n"},
		{"quote wrap", "> aaa bbb ccc", 9, "│ aaa bbb\n│ ccc\n"},
		{"indented code", "para\n\n    code  line\n\n    more", 40, "para\n\n  code  line\n\n  more\n"},
		{"table in text", "Sizes:\n| a | b |\n|:-:|---|\n| 1 | 2 |", 40, "Sizes:\n\na │ b\n──┼──\n1 │ 2\n"},
		{"table short row", "| a | b |\n|---|---|\n| 1 |\n| 1 | 2 | 3 |", 40, "a │ b\n──┼──\n1 │\n1 │ 2\n"},
		{"table escaped pipe", "| a |\n|---|\n| `x\\|y` \\| z |", 40, "a\n───────\nx|y | z\n"},
		{"table centred", "| abcde |\n|:-:|\n| a |", 40, "abcde\n─────\n  a\n"},
		{"table wrapped", "| name | description |\n|---|---|\n| x | a longer text here |", 20, "name │ description\n─────┼──────────────\nx    │ a longer text\n     │ here\n"},
		{"table too wide", "| a | b | c | d | e |\n|---|---|---|---|---|\n| 1 | 2 | 3 | 4 | 5 |", 12, "| a | b | c\n| d | e |\n|---|---|---\n|---|---|\n| 1 | 2 | 3\n| 4 | 5 |\n"},
		{"not a table", "a | b\n-- | x", 40, "a | b -- | x\n"},
		{"only references", "[r]: https://a.b", 40, "[r]: https://a.b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := NewMarkdown(true, tc.width).Render(tc.in)
			if p := plain(out); p != tc.want {
				t.Errorf("Render(%q) at %d shows\n%q, want\n%q", tc.in, tc.width, p, tc.want)
			}
			if !strings.HasSuffix(tc.want, "\n") {
				return // shown as written
			}
			checkRendered(t, out, tc.width)
		})
	}
}

func TestRenderUnstyled(t *testing.T) {
	m := NewMarkdown(false, 80)
	for _, in := range []string{
		"",
		"# Title\n\n**bold**   \n",
		"no newline at the end",
		"```\ncode\n```",
		"\n\n  spaces  \n\n",
		"\xff\xfe not UTF-8 \x1b[2J",
	} {
		if out := m.Render(in); out != in {
			t.Errorf("Render(%q) = %q, want it as written", in, out)
		}
	}
}

// TestRenderTerminalSafe: text made safe by termsafe stays safe when
// rendered, including character references, which rendering decodes.
func TestRenderTerminalSafe(t *testing.T) {
	raw := "# Clip\x1b]52;c;aGVsbG8=\x07 and \x1b[2J clear\n\n" +
		"refs: &#27;[2J &#x1b;]52;c;aGk=&#7; &#x9b;2J &lrm;x &#x202e;y &#27 &ESC;\n\n" +
		"`code &#27;[2J` and &amp;#27; stays\n\n" +
		"<b>&#27;[2J</b>\n\n" +
		"[link](http://a/&#27;[2J \"&#27;[2J\")\n\n" +
		"```\n&#27;[2J in a block\n```\n"
	out := NewMarkdown(true, 80).Render(termsafe.Text(raw))
	checkRendered(t, out, 80)
	for _, bad := range []string{"\x1b]", "\x1b[2J", "\x07", "\u009b", "\u200e", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q: %q", bad, out)
		}
	}
	p := plain(out)
	for _, shown := range []string{`\x1b]52;c;aGVsbG8=\a`, `\x1b[2J`, "&#27;[2J", "&#x1b;]52;c;aGk=&#7;", "&lrm;", "&#27;"} {
		if !strings.Contains(p, shown) {
			t.Errorf("%q not shown as written:\n%s", shown, p)
		}
	}
	// A reference to a safe character is still decoded.
	if out := plain(NewMarkdown(true, 80).Render("**a** &amp; &lt;b&gt; &#233;\n")); !strings.Contains(out, "a & <b> é") {
		t.Errorf("safe references not decoded: %q", out)
	}
}

// TestRenderHostile: text written to make rendering slow, in time
// quadratic in its length or worse, comes back promptly as written; text
// that only looks so renders promptly.
func TestRenderHostile(t *testing.T) {
	m := NewMarkdown(true, 80)
	for name, in := range map[string]string{
		"strong nesting":    strings.Repeat("**", 32000) + "x" + strings.Repeat("**", 32000),
		"emphasis nesting":  strings.Repeat("*a ", 5000) + strings.Repeat("b* ", 5000),
		"link nesting":      strings.Repeat("[", 5000) + strings.Repeat("](x)", 5000),
		"quote nesting":     strings.Repeat(">", 100) + " x\n",
		"list nesting":      strings.Repeat("- ", 50) + "x\n",
		"list indent":       indentedList(100),
		"many nested items": strings.Repeat("- a\n  - b\n    - c\n\n", 500),
		"long word":         strings.Repeat("w", 20000),
		"long underscores":  strings.Repeat("_a", 10000),
		"too long":          strings.Repeat("word ", 20000),
	} {
		if !costly(in) {
			t.Errorf("%s: not costly", name)
		}
		start := time.Now()
		out := m.Render(in)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: Render took %v", name, d)
		}
		if out != in {
			t.Errorf("%s: not returned as written", name)
		}
	}
	for name, in := range map[string]string{
		"many headings": strings.Repeat("# h\n", 2000),
		"many rules":    strings.Repeat("---\n\n", 2000),
		"long table":    "| a | b |\n|---|---|\n" + strings.Repeat("| x y | 1 2 |\n", 2000),
		"wide table":    "|" + strings.Repeat(" a |", 200) + "\n|" + strings.Repeat("---|", 200) + "\n",
	} {
		if costly(in) {
			t.Errorf("%s: costly", name)
		}
		start := time.Now()
		out := render(in, 80)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: render took %v", name, d)
		}
		if out == "" {
			t.Errorf("%s: not rendered", name)
		}
		checkRendered(t, out, 80)
	}
}

func indentedList(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat("  ", i) + "- x\n")
	}
	return b.String()
}

// TestRenderLongReply: a long reply of ordinary markdown is within
// costly's limits and renders.
func TestRenderLongReply(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 16<<10; i++ {
		b.WriteString("## Step\n\nRun `make test` and read **each** failure; see [the docs](https://example.com).\n\n")
		b.WriteString("```sh\nfor f in *_test.go; do go test -run \"$f\" ./...; done\n```\n\n- first\n- second\n\n")
	}
	in := b.String()
	if costly(in) {
		t.Fatalf("a %d-byte ordinary reply is costly", len(in))
	}
	// Not through Render, whose time budget a loaded test machine may
	// exceed.
	out := render(in, 100)
	if out == "" {
		t.Fatal("not rendered")
	}
	checkRendered(t, out, 100)
}

func TestWorth(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"", false},
		{"The disk is 42% full; nothing to do.", false},
		{"It costs 2 * 3 = 6 dollars.", false},
		{"Use my_var_name and other_name here.", false},
		{"A line\nand another, with a - dash and 1.5 liters.", false},
		{"Don't use `rm -rf` here.", true},
		{"```\ncode\n```", true},
		{"~~~\ncode\n~~~", true},
		{"# Title", true},
		{"### Sub", true},
		{"#hashtag", false},
		{"Some **bold** text.", true},
		{"Some *emphasis* here.", true},
		{"Some _emphasis_ here.", true},
		{"~~gone~~", true},
		{"- one\n- two", true},
		{"* one", true},
		{"1. first\n2. second", true},
		{"3) third", true},
		{"see [the docs](https://example.com)", true},
		{"see [the docs][1]\n\n[1]: https://example.com", true},
		{"<https://example.com>", true},
		{"| a | b |\n|---|---|\n| 1 | 2 |", true},
		{"> quoted", true},
		{"text\n\n---\n\nmore", true},
		{"Title\n=====", true},
		{"para\n\n    indented code", true},
	} {
		if got := Worth(tc.text); got != tc.want {
			t.Errorf("Worth(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestStyled(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "xterm-256color")
	if Styled(&bytes.Buffer{}) {
		t.Error("Styled(bytes.Buffer) is true")
	}
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if Styled(f) {
		t.Error("Styled(regular file) is true")
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if !Styled(tty) {
		t.Error("Styled(pty) is false")
	}
	t.Setenv("NO_COLOR", "1")
	if Styled(tty) {
		t.Error("Styled(pty) is true with NO_COLOR=1")
	}
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "dumb")
	if Styled(tty) {
		t.Error("Styled(pty) is true with TERM=dumb")
	}
}

// TestRenderAsksTerminalNothing: rendering writes nothing to the terminal,
// in particular no query (a renderer that picks its colours by the
// terminal's background asks for it), whose answer would arrive as typed
// input. A package may pick up os.Stdout when it starts, so the render
// runs in a child whose stdout is its terminal, a pty, from the start.
func TestRenderAsksTerminalNothing(t *testing.T) {
	if os.Getenv("OLLIE_CHAT_RENDER_CHILD") == "1" {
		in := "# T\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```go\nx := 1\n```\n\n> q **b** [l](http://x)\n"
		if out := NewMarkdown(Styled(os.Stdout), 80).Render(in); out == in {
			os.Stderr.WriteString("child: not rendered\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRenderAsksTerminalNothing$")
	cmd.Env = append(os.Environ(), "OLLIE_CHAT_RENDER_CHILD=1", "TERM=xterm-256color", "NO_COLOR=", "COLORTERM=truecolor")
	cmd.Stdin, cmd.Stdout = tty, tty
	// As a chat over ssh is: the pty is its controlling terminal and it is
	// in the foreground, without which a program that queries the terminal
	// (termenv, say) asks nothing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(ptmx) // ends in EIO once the child has gone
		got <- b
	}()
	werr := cmd.Wait()
	select {
	case b := <-got:
		if len(b) > 0 {
			t.Errorf("rendering wrote %q to the terminal", b)
		}
	case <-time.After(5 * time.Second):
		t.Error("pty did not close")
	}
	if werr != nil {
		t.Errorf("child: %v\n%s", werr, stderr.String())
	}
}

// TestBounded: a render past its budget gives up, and none starts until
// it has ended.
func TestBounded(t *testing.T) {
	release := make(chan struct{})
	if out := bounded(10*time.Millisecond, func() string { <-release; return "late" }); out != "" {
		t.Fatalf("bounded past its budget = %q, want \"\"", out)
	}
	if out := bounded(time.Second, func() string { return "next" }); out != "" {
		t.Errorf("bounded while one is stuck = %q, want \"\"", out)
	}
	close(release)
	await.Until(t, 5*time.Second, "the render to be unstuck after the slow one ended", func() bool { return !stuck.Load() })
	if out := bounded(time.Second, func() string { return "next" }); out != "next" {
		t.Errorf("bounded after the slow render ended = %q, want \"next\"", out)
	}
}

// FuzzRender: whatever the model writes, made safe by termsafe, renders
// without a panic into output whose only escapes are colour codes.
func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"# T\n\n**b** `c`\n\n```go\nx\n```\n- l\n",
		"&#27;[2J &#x1b; &#155; &lrm; &NewLine; &Tab; &#0; &#x110000;",
		"| a |\n|---|\n| &#27;[31m |",
		"<div>&#27;]52;c;x&#7;</div>",
		"\x1b[2J\x1b]52;c;eA==\x07\u202e\x9b",
		"> > > - - 1. [x](<&#27;>)",
	} {
		f.Add(s)
	}
	m := NewMarkdown(true, 40)
	f.Fuzz(func(t *testing.T, s string) {
		out := m.Render(termsafe.Text(s))
		if !termsafe.Safe(plain(out), true) {
			t.Fatalf("Render(termsafe.Text(%q)) = %q holds an escape that is not a colour code", s, out)
		}
	})
}

// BenchmarkRender renders a reply of about 2 KiB, a long answer's size.
func BenchmarkRender(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 2<<10 {
		sb.WriteString("## Step\n\nRun `make test` and read **each** failure.\n\n```sh\ngo test ./...\n```\n\n- first\n- second\n\n")
	}
	in := sb.String()
	m := NewMarkdown(true, 100)
	for b.Loop() {
		m.Render(in)
	}
}
