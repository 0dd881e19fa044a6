package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/broker"
)

// Converse is the one answering side every hop runs (the gate, the
// keeper's broker, the terminal broker, a play's module): these tests hold
// its rules, whatever the Answerer.

// answering is an Answerer that answers as told and records what it was
// asked.
type answering struct {
	ans      broker.Answer
	put      bool
	password func(attempt int) ([]byte, error)

	mu    sync.Mutex
	asked []int  // password attempts it was asked
	gave  []byte // the last secret it gave, as it is after give
	ended chan string
}

func newAnswering(ans broker.Answer) *answering {
	return &answering{ans: ans, put: true, ended: make(chan string, 1),
		password: func(int) ([]byte, error) { return []byte("Hunter2"), nil }}
}

func (s *answering) Decide(context.Context, *broker.Request) (broker.Answer, bool) {
	return s.ans, s.put
}

func (s *answering) Password(_ context.Context, _ *broker.Request, attempt int, _ string, give func([]byte) error) error {
	s.mu.Lock()
	s.asked = append(s.asked, attempt)
	s.mu.Unlock()
	pw, err := s.password(attempt)
	if err != nil {
		return err
	}
	err = give(pw)
	s.mu.Lock()
	s.gave = pw
	s.mu.Unlock()
	return err
}

func (s *answering) End(_ *broker.Request, how string) { s.ended <- how }

func (s *answering) attempts() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.asked...)
}

// conversing runs Converse with a on the answering end of a pipe, for req,
// and returns the asker's conversation and Converse's error when it ends.
func conversing(t *testing.T, req *broker.Request, a broker.Answerer, reply time.Duration) (*broker.Conversation, broker.Answer, error, <-chan error) {
	t.Helper()
	asker, answerer := net.Pipe()
	t.Cleanup(func() { asker.Close(); answerer.Close() })
	done := make(chan error, 1)
	go func() {
		defer answerer.Close()
		in, err := broker.Receive(context.Background(), answerer)
		if err != nil {
			done <- err
			return
		}
		done <- broker.Converse(context.Background(), in, a, reply)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cv, ans, err := broker.Ask(ctx, asker, req)
	return cv, ans, err, done
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Converse did not return")
		return nil
	}
}

func ended(t *testing.T, s *answering) string {
	t.Helper()
	select {
	case how := <-s.ended:
		return how
	case <-time.After(10 * time.Second):
		t.Fatal("End was not called")
		return ""
	}
}

// A sudo request asks in turn: three passwords, each zeroed once sent,
// then the result reaches End.
func TestConverseSudoInTurn(t *testing.T) {
	s := newAnswering(broker.Answer{Decision: broker.Once})
	cv, ans, err, done := conversing(t, &broker.Request{Session: "s", Tool: "fix", Sudo: true}, s, 0)
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v %v", ans, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		pw, err := cv.Password(ctx, i, "wrong password")
		if string(pw) != "Hunter2" || err != nil {
			t.Fatalf("attempt %d: %q %v", i, pw, err)
		}
	}
	cv.Close("ran")
	if err := waitErr(t, done); err != nil {
		t.Errorf("Converse: %v", err)
	}
	if how := ended(t, s); how != "ran" {
		t.Errorf("End heard %q, want the asker's result", how)
	}
	if got := fmt.Sprint(s.attempts()); got != "[1 2 3]" {
		t.Errorf("the answerer was asked for attempts %s", got)
	}
	if strings.Trim(string(s.gave), "\x00") != "" {
		t.Errorf("the secret given was not zeroed once sent: %q", s.gave)
	}
}

// Every ask out of the rules is denied, saying why, and the answerer is
// never asked for it: not sudo, out of turn, past the third.
func TestConverseRefusesAsks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sudo    bool
		asks    []int
		want    string // in the denial
		answerd int    // asks the answerer saw
	}{
		{"not sudo", false, []int{1}, "not sudo", 0},
		{"first again", true, []int{1, 1}, "the next ask of this request is 2", 1},
		{"skips ahead", true, []int{2}, "the next ask of this request is 1", 0},
		{"fourth", true, []int{1, 2, 3, 4}, "already asked 3 times", 3},
		{"out of range", true, []int{1, 7}, "the next ask of this request is 2", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAnswering(broker.Answer{Decision: broker.Once})
			cv, _, err, done := conversing(t, &broker.Request{Session: "s", Tool: "fix", Sudo: tc.sudo}, s, 0)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var last error
			for _, n := range tc.asks {
				if _, last = cv.Password(ctx, n, ""); last != nil {
					break
				}
			}
			if !errors.Is(last, broker.ErrDenied) || !strings.Contains(last.Error(), tc.want) {
				t.Errorf("the last ask: %v, want a denial saying %q", last, tc.want)
			}
			var bad *broker.AttemptError
			if err := waitErr(t, done); !errors.As(err, &bad) {
				t.Errorf("Converse: %v, want an *AttemptError", err)
			}
			if how := ended(t, s); !strings.HasPrefix(how, "denied: ") || !strings.Contains(how, tc.want) {
				t.Errorf("End heard %q", how)
			}
			if n := len(s.attempts()); n != tc.answerd {
				t.Errorf("the answerer was asked %d times, want %d", n, tc.answerd)
			}
		})
	}
}

// Nobody to ask: the conversation closes unanswered, at the decision or
// at a password, so that whoever relayed it asks another. A password
// refused is a denial with the answerer's reason.
func TestConverseUnansweredAndRefused(t *testing.T) {
	s := newAnswering(broker.Answer{})
	s.put = false
	_, _, err, done := conversing(t, &broker.Request{Session: "s", Tool: "fix", Sudo: true}, s, 0)
	if err == nil {
		t.Error("an answer came from an answerer that asked nobody")
	}
	if err := waitErr(t, done); !errors.Is(err, broker.ErrUnanswered) {
		t.Errorf("Converse: %v, want ErrUnanswered", err)
	}
	if how := ended(t, s); how != "unanswered" {
		t.Errorf("End heard %q", how)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("gone: %w", broker.ErrUnanswered), ""},
		{fmt.Errorf("%w: the person said no", broker.ErrDenied), "the person said no"},
		{errors.New("the dialog crashed"), "the dialog crashed"},
	} {
		s := newAnswering(broker.Answer{Decision: broker.Once})
		s.password = func(int) ([]byte, error) { return nil, tc.err }
		cv, _, err, done := conversing(t, &broker.Request{Session: "s", Tool: "fix", Sudo: true}, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, perr := cv.Password(ctx, 1, "")
		cerr := waitErr(t, done)
		how := ended(t, s)
		if tc.want == "" {
			if errors.Is(perr, broker.ErrDenied) || !errors.Is(cerr, broker.ErrUnanswered) || how != "unanswered" {
				t.Errorf("%v: the asker got %v, Converse %v, End %q; want it closed unanswered", tc.err, perr, cerr, how)
			}
			continue
		}
		if !errors.Is(perr, broker.ErrDenied) || perr.Error() != "denied: "+tc.want || cerr != nil || how != "denied: "+tc.want {
			t.Errorf("%v: the asker got %v, Converse %v, End %q; want a denial %q", tc.err, perr, cerr, how, tc.want)
		}
	}
}

// An asker that owes a message and sends nothing is dropped after reply;
// the answer it was given stands.
func TestConverseReplyWait(t *testing.T) {
	s := newAnswering(broker.Answer{Decision: broker.Once})
	_, ans, err, done := conversing(t, &broker.Request{Session: "s", Tool: "fix", Sudo: true}, s, 100*time.Millisecond)
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v %v", ans, err)
	}
	if err := waitErr(t, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Converse: %v, want the reply wait's end", err)
	}
	if how := ended(t, s); how != "broken" {
		t.Errorf("End heard %q", how)
	}
}
