package chat

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"ollie/internal/termsafe"
)

// A view shows an agent's chat stream as it comes: the model's text as
// written, each tool call and its result on a line of its own, notes in
// brackets. The stream is the host's text, so all of it is made safe
// before it reaches the terminal.
//
// Text is shown the moment it arrives (the time to the first character is
// the figure people feel); a finished reply with markdown in it is drawn
// again, rendered, when the terminal can show it whole.
type view struct {
	mu     sync.Mutex
	out    func([]byte) // the terminal (or stdout), safe for concurrent use
	md     *Markdown
	width  func() (cols, rows int)
	styled bool

	held    []byte // an incomplete character, or a tool or note line not yet whole
	atStart bool   // the next byte begins a line
	lineCol int    // columns written on the current line (for the re-draw)
	expect  string // the echo of our own prompt, dropped when it comes

	afterEcho bool // our prompt's echo was just dropped

	reply     strings.Builder // the model's text since the last tool or note line
	replyRows int             // the rows it took on the screen
	quiet     bool            // hold complete lines only: a prompt is on the screen
}

func newView(out func([]byte), md *Markdown, styled bool, width func() (int, int)) *view {
	return &view{out: out, md: md, styled: styled, width: width, atStart: true}
}

// expectEcho makes the view drop the stream's echo of a prompt we sent.
func (v *view) expectEcho(prompt string) {
	v.mu.Lock()
	v.expect = prompt + "\n"
	v.mu.Unlock()
}

// setQuiet holds partial lines back while the line editor shows a prompt,
// so another person's turn never writes into the line being typed.
func (v *view) setQuiet(q bool) {
	v.mu.Lock()
	v.quiet = q
	v.mu.Unlock()
}

// Write takes the stream's bytes as they come.
func (v *view) Write(p []byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	data := append(v.held, p...)
	v.held = nil
	var out bytes.Buffer
	for len(data) > 0 {
		if v.expect != "" {
			n := commonPrefix(data, v.expect)
			switch {
			case n == len(v.expect):
				data, v.expect = data[n:], ""
				v.atStart, v.afterEcho = true, true
				continue
			case n == len(data): // the echo so far: the rest is to come
				v.expect = v.expect[n:]
				data = nil
				continue
			}
			v.expect = "" // someone else's text came first
		}
		if v.afterEcho && data[0] == '\n' {
			// The line the person typed is on the screen already: no
			// blank line under it before a tool call.
			data = data[1:]
			continue
		}
		v.afterEcho = false
		nl := bytes.IndexByte(data, '\n')
		if v.atStart && ownLine(data) {
			if nl < 0 {
				v.held = data
				break
			}
			v.line(&out, string(data[:nl]))
			data = data[nl+1:]
			continue
		}
		if nl >= 0 {
			v.text(&out, string(data[:nl+1]))
			data = data[nl+1:]
			continue
		}
		if v.quiet { // a partial line waits for its end
			v.held = data
			break
		}
		j := wholeRunes(data)
		v.text(&out, string(data[:j]))
		if j < len(data) {
			v.held = append([]byte(nil), data[j:]...)
		}
		break
	}
	if out.Len() > 0 {
		v.out(out.Bytes())
	}
	return len(p), nil
}

// ownLine reports whether a line beginning with b gets a line of its own:
// a tool call (→), a tool's result (←) or a note ([...]).
func ownLine(b []byte) bool {
	return bytes.HasPrefix(b, []byte("→ ")) || bytes.HasPrefix(b, []byte("← ")) || b[0] == '['
}

// wholeRunes is the length of b without an incomplete character at its end.
func wholeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

func commonPrefix(b []byte, s string) int {
	n := 0
	for n < len(b) && n < len(s) && b[n] == s[n] {
		n++
	}
	return n
}

// text writes the model's words, counting the rows they take.
func (v *view) text(out *bytes.Buffer, s string) {
	safe := termsafe.Text(s)
	out.WriteString(safe)
	v.reply.WriteString(s)
	cols, _ := v.width()
	for _, r := range safe {
		if r == '\n' {
			v.replyRows++
			v.lineCol = 0
			continue
		}
		v.lineCol++
		if cols > 0 && v.lineCol > cols {
			v.replyRows++
			v.lineCol = 1
		}
	}
	v.atStart = strings.HasSuffix(s, "\n")
}

// line writes a tool call, a tool's result or a note, on a line of its
// own, cut to the terminal's width. It ends the reply before it.
func (v *view) line(out *bytes.Buffer, s string) {
	note := strings.HasPrefix(s, "[")
	if note && !strings.HasSuffix(s, "]") {
		v.text(out, s+"\n") // the model's own line that starts with a bracket
		return
	}
	if !v.atStart || v.lineCol > 0 {
		out.WriteString("\n")
		v.replyRows++
		v.lineCol = 0
	}
	v.endReply(out)
	cols, _ := v.width()
	if cols <= 0 {
		cols = 80
	}
	shown := termsafe.Line(s) // a note is shown whole
	if !note {
		// A call's arguments and a result's summary are cut to a line;
		// /expand shows them whole.
		shown = termsafe.Field(s, max(cols-1, 8))
	}
	if v.styled {
		shown = "\x1b[2m" + shown + "\x1b[0m"
	}
	out.WriteString(shown + "\n")
	v.atStart, v.lineCol = true, 0
}

// endReply draws the reply since the last line again, rendered, when it
// has markdown and fits on the screen; it starts the next reply.
func (v *view) endReply(out *bytes.Buffer) {
	text := v.reply.String()
	// The cursor is replyRows rows below the reply's first row (each line
	// end and each wrap moved it down one), at lineCol on its row.
	up := v.replyRows
	rows := up
	if v.lineCol > 0 {
		rows++
	}
	v.reply.Reset()
	v.replyRows, v.lineCol = 0, 0
	if !v.styled || v.md == nil || strings.TrimSpace(text) == "" || !Worth(text) {
		return
	}
	_, height := v.width()
	if rows == 0 || height <= 0 || rows >= height-1 {
		return // part of it has scrolled away: it stays as written
	}
	// Up to the reply's first row, clear to the end of the screen, and
	// draw it rendered.
	out.WriteString("\r")
	if up > 0 {
		out.WriteString("\x1b[" + strconv.Itoa(up) + "A")
	}
	out.WriteString("\x1b[J")
	out.WriteString(v.md.Render(termsafe.Text(text)))
}

// note writes a line of the chat's own, on a line of its own.
func (v *view) note(s string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out bytes.Buffer
	if v.lineCol > 0 {
		out.WriteString("\n")
		v.replyRows++
		v.lineCol = 0
	}
	out.WriteString(s + "\n")
	v.atStart = true
	v.out(out.Bytes())
}

// endTurn finishes what the turn left: a line without its end, a reply
// to render.
func (v *view) endTurn() {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out bytes.Buffer
	if len(v.held) > 0 {
		held := v.held
		v.held = nil
		v.text(&out, string(held))
	}
	if v.lineCol > 0 {
		out.WriteString("\n")
		v.replyRows++
		v.lineCol = 0
	}
	v.endReply(&out)
	v.atStart = true
	v.expect = ""
	if out.Len() > 0 {
		v.out(out.Bytes())
	}
}
