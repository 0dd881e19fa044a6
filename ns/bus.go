package ns

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// An Event is one message on the bus: a dotted topic such as
// "session.{sid}.agent.{aid}.state" and a one-line payload.
type Event struct {
	Topic string
	Data  string
}

// LostTopic is the topic of the event that tells a subscriber how many
// events it lost because its queue was full. Its payload is the count.
const LostTopic = "event.lost"

// A Bus delivers events to subscribers whose patterns match their topic.
// Publish never blocks: each subscriber has a bounded queue, and when it
// overflows the subscriber is later told how many events it lost.
type Bus struct {
	// QueueLen and QueueBytes bound each subscriber's queue (defaults
	// 1024 events and 1 MiB).
	QueueLen   int
	QueueBytes int

	mu   sync.Mutex
	subs map[*Sub]struct{}
}

// Match reports whether topic matches pattern. Patterns are dotted like
// topics: "*" as a segment matches one segment, a trailing "*" matches one
// or more, and the pattern "*" matches everything.
func Match(pattern, topic string) bool {
	for {
		pseg, prest, pmore := strings.Cut(pattern, ".")
		tseg, trest, tmore := strings.Cut(topic, ".")
		if pseg == "*" && !pmore {
			return tseg != ""
		}
		if pseg != "*" && pseg != tseg {
			return false
		}
		if !pmore || !tmore {
			return pmore == tmore
		}
		pattern, topic = prest, trest
	}
}

// Publish delivers ev to every matching subscriber without blocking.
func (b *Bus) Publish(topic, data string) {
	ev := Event{Topic: topic, Data: oneLine(data)}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if s.matches(ev.Topic) {
			s.push(ev)
		}
	}
}

func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}

// Subscribe returns a subscription to events matching any of patterns
// (all events when patterns is empty). Close it when done.
func (b *Bus) Subscribe(patterns ...string) *Sub {
	qlen, qbytes := b.QueueLen, b.QueueBytes
	if qlen <= 0 {
		qlen = 1024
	}
	if qbytes <= 0 {
		qbytes = 1 << 20
	}
	s := &Sub{bus: b, patterns: patterns, maxLen: qlen, maxBytes: qbytes, ready: make(chan struct{}, 1)}
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[*Sub]struct{}{}
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

// A Sub is one subscriber's bounded queue. It is a Source whose items are
// lines "topic payload\n".
type Sub struct {
	bus      *Bus
	patterns []string
	maxLen   int
	maxBytes int

	mu     sync.Mutex
	queue  []Event
	bytes  int
	lost   int // events lost since the last queued event (a marker at the tail)
	closed bool
	ready  chan struct{} // signalled when the queue becomes non-empty
}

func (s *Sub) matches(topic string) bool {
	if len(s.patterns) == 0 {
		return true
	}
	for _, p := range s.patterns {
		if Match(p, topic) {
			return true
		}
	}
	return false
}

func (s *Sub) push(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	size := len(ev.Topic) + len(ev.Data) + 2
	if len(s.queue) >= s.maxLen || s.bytes+size > s.maxBytes {
		s.lost++
		return
	}
	s.flushLost()
	s.queue = append(s.queue, ev)
	s.bytes += size
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// flushLost turns a pending loss count into a marker event in its place in
// the queue, so the subscriber learns where the gap is.
func (s *Sub) flushLost() {
	if s.lost > 0 {
		s.queue = append(s.queue, Event{Topic: LostTopic, Data: fmt.Sprint(s.lost)})
		s.lost = 0
	}
}

// Events returns the queued events, blocking until there is at least one,
// the subscription is closed (io.EOF), or ctx is done.
func (s *Sub) Events(ctx context.Context) ([]Event, error) {
	for {
		s.mu.Lock()
		s.flushLost()
		if len(s.queue) > 0 {
			q := s.queue
			s.queue, s.bytes = nil, 0
			s.mu.Unlock()
			return q, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, io.EOF
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// Next implements Source: the queued events as lines.
func (s *Sub) Next(ctx context.Context) ([]byte, error) {
	evs, err := s.Events(ctx)
	if err != nil {
		return nil, err
	}
	return FormatEvents(evs), nil
}

// FormatEvents renders events as "topic payload\n" lines.
func FormatEvents(evs []Event) []byte {
	var b bytes.Buffer
	for _, ev := range evs {
		b.WriteString(ev.Topic)
		b.WriteByte(' ')
		b.WriteString(ev.Data)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Close removes the subscription; a blocked Events returns io.EOF.
func (s *Sub) Close() error {
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return nil
}
