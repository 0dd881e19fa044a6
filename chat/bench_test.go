package chat

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
)

// marker is a screen that notes when a string first shows on it, after
// what it found last: a prompt drawn before the test looks for it counts.
type marker struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	pos  int // where the last match ended
	want string
	seen chan time.Time
}

func (m *marker) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf.Write(p)
	m.check(time.Now())
	return len(p), nil
}

// check reports want if it shows after pos; m.mu is held.
func (m *marker) check(at time.Time) {
	if m.want == "" {
		return
	}
	if i := bytes.Index(m.buf.Bytes()[m.pos:], []byte(m.want)); i >= 0 {
		m.pos += i + len(m.want)
		m.want = ""
		m.seen <- at
	}
}

// expect arms the marker for want, shown after the last match.
func (m *marker) expect(want string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.want = want
	m.check(time.Now())
}

// BenchmarkChatFirstChar is the time from Enter to the reply's first
// characters on a terminal (ns/op), beside the scripted model's own time
// to its first token, as the real openai-go client sees it in the same
// run (model-ttft-ms). added-ms is what the chat, the daemon and the
// namespace add. The figures are in docs/benchmarks.md.
func BenchmarkChatFirstChar(b *testing.B) {
	b.Setenv("NO_COLOR", "1")
	l := newChatLab(b, true)
	scr := &marker{seen: make(chan time.Time, 1)}
	scr.expect("› ")
	keys, _ := l.onPty(b, l.options(""), scr)
	<-scr.seen

	// The peer: the same scripted reply asked for directly, with the
	// openai-go client the daemon's backend uses.
	be, err := backend.NewOpenAI(backend.Config{Name: "peer", Type: backend.TypeOpenAI, URL: l.llm.URL + "/v1", Model: "fake-model"}, "k")
	if err != nil {
		b.Fatal(err)
	}
	var model, chat time.Duration
	b.ResetTimer()
	for i := range b.N {
		word := "reply" + strconv.Itoa(i) + "x"
		l.llm.Push(fakellm.Text(word, " and the rest"))
		start := time.Now()
		first := make(chan time.Duration, 1)
		_, err := be.Chat(context.Background(), []backend.Message{{Role: backend.RoleUser, Content: "hi"}}, nil, backend.Params{}, func(d backend.Delta) {
			if d.Text != "" {
				select {
				case first <- time.Since(start):
				default:
				}
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		model += <-first

		l.llm.Push(fakellm.Text(word, " and the rest"))
		scr.expect(word)
		start = time.Now()
		io.WriteString(keys, "say it\r")
		select {
		case at := <-scr.seen:
			chat += at.Sub(start)
		case <-time.After(20 * time.Second):
			b.Fatalf("the reply never showed:\n%s", scr.buf.String())
		}
		scr.expect("› ")
		<-scr.seen // the turn's end and the next prompt
	}
	b.StopTimer()
	n := time.Duration(b.N)
	b.ReportMetric(float64(chat/n)/1e6, "enter-to-char-ms")
	b.ReportMetric(float64(model/n)/1e6, "model-ttft-ms")
	b.ReportMetric(float64((chat-model)/n)/1e6, "added-ms")
}
