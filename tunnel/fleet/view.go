package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"ollie/internal/termsafe"
)

// Live is the live view on a terminal: a line per host (state, time, the
// agent's own last line of output, Host.Detail) and a line of counts,
// redrawn in place a few times a second. It is a few ANSI sequences of
// our own rather than a progress library: it draws rows of text that
// change, not progress bars.
type Live struct {
	Out   io.Writer
	Run   *Run
	Width func() (cols, rows int) // the terminal's size

	mu     sync.Mutex
	hosts  map[string]Host
	drawn  int  // lines drawn last time, to move up over
	paused bool // a prompt holds the terminal
	dirty  bool
	last   time.Time // the last draw
	stop   chan struct{}
	done   chan struct{}
}

// Start draws every 200 ms while something changed, until Stop.
func (v *Live) Start() {
	v.hosts = map[string]Host{}
	for _, h := range v.Run.Hosts {
		v.hosts[h.Name] = *h
	}
	v.stop, v.done = make(chan struct{}), make(chan struct{})
	v.dirty = true
	go func() {
		defer close(v.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-v.stop:
				v.draw(true)
				return
			case <-t.C:
				v.draw(false)
			}
		}
	}()
}

// Stop draws a last time and leaves the view on the screen.
func (v *Live) Stop() {
	close(v.stop)
	<-v.done
}

func (v *Live) Changed(h Host) {
	v.mu.Lock()
	v.hosts[h.Name] = h
	v.dirty = true
	v.mu.Unlock()
}

func (v *Live) Output(host, line string) {}

// Pause stops redrawing while something else writes to the terminal (an
// approval prompt); Resume draws again below what was written.
func (v *Live) Pause() {
	v.mu.Lock()
	v.paused = true
	v.mu.Unlock()
}

func (v *Live) Resume() {
	v.mu.Lock()
	v.paused, v.drawn, v.dirty = false, 0, true
	v.mu.Unlock()
}

// Say prints a line above the view.
func (v *Live) Say(line string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clear()
	fmt.Fprintln(v.Out, termsafe.Line(line))
	v.dirty = true
}

func (v *Live) clear() {
	if v.drawn > 0 {
		fmt.Fprintf(v.Out, "\x1b[%dA\r\x1b[J", v.drawn)
		v.drawn = 0
	}
}

// Elapsed time moves on its own: the view is redrawn each second even
// when nothing else changed.
func (v *Live) draw(force bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.paused && !force {
		return
	}
	if !v.dirty && !force && time.Since(v.last) < time.Second {
		return
	}
	v.dirty, v.last = false, time.Now()
	cols, rows := 100, 40
	if v.Width != nil {
		if c, r := v.Width(); c > 0 {
			cols, rows = c, r
		}
	}
	hosts := make([]Host, 0, len(v.hosts))
	for _, h := range v.Run.Hosts {
		hosts = append(hosts, v.hosts[h.Name])
	}
	lines := viewLines(hosts, time.Now(), cols, max(rows-3, 3))
	var b strings.Builder
	if v.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\r", v.drawn)
	}
	for _, l := range lines {
		b.WriteString("\x1b[2K")
		b.WriteString(l)
		b.WriteString("\n")
	}
	b.WriteString("\x1b[J")
	io.WriteString(v.Out, b.String())
	v.drawn = len(lines)
}

// viewLines are the view's lines: a row per host, working hosts first
// when they do not all fit, and the counts.
func viewLines(hosts []Host, now time.Time, cols, rows int) []string {
	width := 4
	for _, h := range hosts {
		width = max(width, utf8.RuneCountInString(termsafe.Line(h.Name)))
	}
	width = min(width, 24)
	stateWidth := 7
	for _, h := range hosts {
		stateWidth = max(stateWidth, utf8.RuneCountInString(termsafe.Line(h.State)))
	}
	stateWidth = min(stateWidth, 28)
	shown := hosts
	if len(hosts) > rows-1 {
		shown = append([]Host(nil), hosts...)
		sort.SliceStable(shown, func(i, j int) bool { return shown[i].Result == "" && shown[j].Result != "" })
		shown = shown[:rows-2]
	}
	var out []string
	for _, h := range shown {
		state := h.State
		if state == "" {
			state = "waiting"
		}
		line := fmt.Sprintf("%-*s  %-*s %7s  %s", width, termsafe.Field(h.Name, width), stateWidth, termsafe.Field(state, stateWidth), seconds(h.Took(now)), termsafe.Line(h.Detail))
		out = append(out, fit(line, cols))
	}
	if len(shown) < len(hosts) {
		out = append(out, fmt.Sprintf("… and %d more hosts", len(hosts)-len(shown)))
	}
	out = append(out, fit(summary(hosts), cols))
	return out
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// fit cuts a line to the terminal's width, so that it never wraps (a
// wrapped line would throw the redraw off).
func fit(s string, cols int) string {
	if cols <= 1 || utf8.RuneCountInString(s) < cols {
		return s
	}
	r := []rune(s)
	return string(r[:cols-2]) + "…"
}

// summary counts hosts by what they do or how they ended.
func summary(hosts []Host) string {
	working := 0
	results := map[string]int{}
	for _, h := range hosts {
		if h.Result == "" {
			working++
		} else {
			results[h.Result]++
		}
	}
	parts := []string{fmt.Sprintf("%d hosts", len(hosts))}
	if working > 0 {
		parts = append(parts, fmt.Sprintf("%d working", working))
	}
	for _, k := range []string{"complete", "done", "blocked", "interrupted", "error", "failed", "unreachable", "lost"} {
		if n := results[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(parts, " · ")
}

// Lines is the view without a terminal, or with -follow: a host-prefixed
// line per change of state, and with Chat, every line of every host's
// chat, as pssh -i prints output.
type Lines struct {
	Out  io.Writer
	Chat bool

	mu     sync.Mutex
	last   map[string]string
	width  int
	paused bool
	held   []string // lines kept while a prompt holds the terminal
}

// Pause holds the lines back while a prompt holds the terminal; Resume
// prints them.
func (v *Lines) Pause() {
	v.mu.Lock()
	v.paused = true
	v.mu.Unlock()
}

func (v *Lines) Resume() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.paused = false
	for _, l := range v.held {
		io.WriteString(v.Out, l)
	}
	v.held = nil
}

// print writes a line, or keeps it while paused; under mu.
func (v *Lines) print(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if v.paused {
		v.held = append(v.held, line)
		return
	}
	io.WriteString(v.Out, line)
}

// Width sets the host column's width from the run's hosts.
func (v *Lines) Width(run *Run) {
	for _, h := range run.Hosts {
		v.width = max(v.width, utf8.RuneCountInString(termsafe.Line(h.Name)))
	}
	v.width = min(v.width, 24)
}

func (v *Lines) Changed(h Host) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last == nil {
		v.last = map[string]string{}
	}
	if v.last[h.Name] == h.State {
		return
	}
	v.last[h.Name] = h.State
	msg := "[" + h.State + "]"
	if h.Result != "" {
		msg = fmt.Sprintf("[%s in %s]", h.Result, seconds(h.Took(time.Now())))
		if first := firstLine(h.Answer); first != "" && h.Finished() {
			msg += " " + first
		} else if h.Detail != "" {
			msg += " " + firstLine(h.Detail)
		}
	}
	v.print("%-*s: %s\n", v.width, termsafe.Line(h.Name), termsafe.Line(msg))
}

func (v *Lines) Output(host, line string) {
	if !v.Chat {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.print("%-*s| %s\n", v.width, termsafe.Line(host), termsafe.Line(line))
}

// Quiet hears nothing: -json prints only the results.
type Quiet struct{}

func (Quiet) Changed(Host)          {}
func (Quiet) Output(string, string) {}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// maxAnswerCell bounds the answer's first line in the table.
const maxAnswerCell = 72

// WriteTable prints the results: a row per host, then the notes of hosts
// that were degraded or that something happened to.
func WriteTable(w io.Writer, run *Run) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tRESULT\tTIME\tSTEPS\tTOOL CALLS\tTOKENS\tANSWER OR ERROR")
	now := time.Now()
	for _, h := range run.Hosts {
		result := h.Result
		if result == "" {
			result = h.State + " (working)"
		}
		text := firstLine(h.Answer)
		if !h.Finished() || text == "" {
			text = firstLine(h.Detail)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", termsafe.Line(h.Name), termsafe.Field(result, 40), seconds(h.Took(now)),
			h.Steps, h.ToolCalls, h.Tokens, orDash(termsafe.Field(text, maxAnswerCell)))
	}
	tw.Flush()
	if u := run.ModelUsage; u != nil {
		line := fmt.Sprintf("the desktop's model: %d requests, %d tokens (%d prompt, %d completion)", u.Requests, u.Tokens(), u.PromptTokens, u.CompletionTokens)
		if u.Refused > 0 {
			line += fmt.Sprintf(", %d refused by the desktop's caps", u.Refused)
		}
		fmt.Fprintln(w, line)
	}
	for _, h := range run.Hosts {
		for _, n := range h.Notes {
			fmt.Fprintf(w, "%s: %s\n", termsafe.Line(h.Name), termsafe.Field(n, 200))
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// JSONHost is a host's result as -json prints it, one object a line.
type JSONHost struct {
	Run       string   `json:"run"`
	Host      string   `json:"host"`
	Result    string   `json:"result"`
	Seconds   float64  `json:"seconds"`
	Steps     int      `json:"steps"`
	ToolCalls int      `json:"tool_calls"`
	Tokens    int      `json:"tokens"`
	Answer    string   `json:"answer,omitempty"`
	Error     string   `json:"error,omitempty"`
	Version   string   `json:"version,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// WriteJSON prints one JSON object per host.
func WriteJSON(w io.Writer, run *Run) error {
	enc := json.NewEncoder(w)
	now := time.Now()
	for _, h := range run.Hosts {
		j := JSONHost{Run: run.ID, Host: h.Name, Result: h.Result, Seconds: h.Took(now).Seconds(), Steps: h.Steps, ToolCalls: h.ToolCalls,
			Tokens: h.Tokens, Answer: h.Answer, Version: h.Version, Notes: h.Notes}
		if j.Result == "" {
			j.Result = "working"
		}
		if !h.Finished() {
			j.Error = h.Detail
		}
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return nil
}

// ExitCode is 0 when every host finished, else 1.
func ExitCode(run *Run) int {
	for _, h := range run.Hosts {
		if !h.Finished() {
			return 1
		}
	}
	return 0
}

// WriteRuns writes the runs a desktop keeps, one row each, for fleet ls.
func WriteRuns(w io.Writer, runs []*Run) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no fleet runs: ollie-remote fleet run TARGETS GOAL")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tCREATED\tSTATE\tHOSTS\tFINISHED\tGOAL")
	for _, r := range runs {
		done := 0
		for _, h := range r.Hosts {
			if h.Finished() {
				done++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, r.Created.Local().Format("2006-01-02 15:04"), r.State, len(r.Hosts), done, termsafe.Field(r.Goal, 60))
	}
	tw.Flush()
}
