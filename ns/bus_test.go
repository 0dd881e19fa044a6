package ns_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"ollie/ns"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, topic string
		want           bool
	}{
		// exact
		{"session.a.state", "session.a.state", true},
		{"session.a.state", "session.b.state", false},
		{"session.a", "session.a.state", false},
		{"session.a.state", "session.a", false},
		{"session", "session", true},
		{"session", "sessions", false},
		// trailing *: one or more segments
		{"session.*", "session.a", true},
		{"session.*", "session.a.agent.b.state", true},
		{"session.*", "session", false},
		{"session.*", "sessionx.a", false},
		{"session.*", "other.a", false},
		// * alone: everything
		{"*", "a", true},
		{"*", "session.a.state", true},
		{"*", "event.lost", true},
		// * in the middle: exactly one segment
		{"session.*.state", "session.a.state", true},
		{"session.*.state", "session.a.b.state", false},
		{"session.*.state", "session.state", false},
		{"session.*.state", "session.a.stats", false},
		{"session.*.agent.*.state", "session.s.agent.a.state", true},
		{"*.state", "x.state", true},
		{"*.state", "x.y.state", false},
		// * is a whole segment, not a glob
		{"sess*", "session", false},
		{"session.a*", "session.ab", false},
	}
	for _, tt := range tests {
		if got := ns.Match(tt.pattern, tt.topic); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.topic, got, tt.want)
		}
	}
}

// drain reads events from s until it has n of them.
func drain(t *testing.T, s *ns.Sub, n int) []ns.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var all []ns.Event
	for len(all) < n {
		evs, err := s.Events(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(all), err)
		}
		all = append(all, evs...)
	}
	return all
}

func TestBusOrder(t *testing.T) {
	t.Parallel()
	var b ns.Bus
	all := b.Subscribe()
	defer all.Close()
	states := b.Subscribe("session.*.state", "control")
	defer states.Close()
	var want, wantStates []ns.Event
	for i := range 100 {
		ev := ns.Event{Topic: fmt.Sprintf("session.%d.state", i%7), Data: fmt.Sprint(i)}
		if i%3 == 0 {
			ev.Topic = "session.x.other"
		}
		if i%10 == 0 {
			ev.Topic = "control"
		}
		b.Publish(ev.Topic, ev.Data)
		want = append(want, ev)
		if ev.Topic != "session.x.other" {
			wantStates = append(wantStates, ev)
		}
	}
	if got := drain(t, all, len(want)); !slices.Equal(got, want) {
		t.Errorf("all events:\n got %v\nwant %v", got, want)
	}
	if got := drain(t, states, len(wantStates)); !slices.Equal(got, wantStates) {
		t.Errorf("filtered events:\n got %v\nwant %v", got, wantStates)
	}
}

func TestBusOneLine(t *testing.T) {
	t.Parallel()
	var b ns.Bus
	s := b.Subscribe()
	defer s.Close()
	b.Publish("t", "two\nlines\r\n")
	got := drain(t, s, 1)
	if got[0].Data != `two\nlines\r\n` {
		t.Errorf("payload %q, want it escaped onto one line", got[0].Data)
	}
	if line := string(ns.FormatEvents(got)); line != "t two\\nlines\\r\\n\n" {
		t.Errorf("FormatEvents: %q", line)
	}
}

func TestSubClose(t *testing.T) {
	t.Parallel()
	var b ns.Bus
	s := b.Subscribe()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Events(context.Background())
		errc <- err
	}()
	s.Close()
	select {
	case err := <-errc:
		if err != io.EOF {
			t.Fatalf("Events after Close: %v, want EOF", err)
		}
	case <-time.After(timeout):
		t.Fatal("Close did not unblock Events")
	}
	// A closed subscription gets nothing more, and Publish does not mind.
	b.Publish("t", "x")
	if _, err := s.Next(context.Background()); err != io.EOF {
		t.Fatalf("Next after Close: %v, want EOF", err)
	}

	// A context ending unblocks Events with its cause.
	s2 := b.Subscribe()
	defer s2.Close()
	cause := errors.New("gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	go cancel(cause)
	if _, err := s2.Events(ctx); !errors.Is(err, cause) {
		t.Fatalf("Events with a cancelled context: %v, want %v", err, cause)
	}
}

func TestBusOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		bus     *ns.Bus
		publish []ns.Event
		want    []ns.Event
	}{
		{
			name: "length",
			bus:  &ns.Bus{QueueLen: 2},
			publish: []ns.Event{
				{"a", "1"}, {"a", "2"}, {"a", "3"}, {"a", "4"},
			},
			want: []ns.Event{{"a", "1"}, {"a", "2"}, {ns.LostTopic, "2"}},
		},
		{
			name: "bytes",
			bus:  &ns.Bus{QueueBytes: 20},
			publish: []ns.Event{
				{"a", "1"}, {"big", "0123456789abcdef"}, {"a", "2"}, {"big", "0123456789abcdef"}, {"big", "0123456789abcdef"}, {"a", "3"},
			},
			// Each loss is marked where it happened.
			want: []ns.Event{{"a", "1"}, {ns.LostTopic, "1"}, {"a", "2"}, {ns.LostTopic, "2"}, {"a", "3"}},
		},
		{
			name:    "defaults",
			bus:     &ns.Bus{},
			publish: slices.Repeat([]ns.Event{{"a", "x"}}, 1100),
			want:    append(slices.Repeat([]ns.Event{{"a", "x"}}, 1024), ns.Event{ns.LostTopic, "76"}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.bus.Subscribe()
			defer s.Close()
			for _, ev := range tt.publish {
				tt.bus.Publish(ev.Topic, ev.Data) // never blocks
			}
			if got := drain(t, s, len(tt.want)); !slices.Equal(got, tt.want) {
				t.Errorf("\n got %v\nwant %v", got, tt.want)
			}
			// Drained, the queue takes events again.
			tt.bus.Publish("after", "1")
			if got := drain(t, s, 1); !slices.Equal(got, []ns.Event{{"after", "1"}}) {
				t.Errorf("after draining: %v", got)
			}
		})
	}
}
