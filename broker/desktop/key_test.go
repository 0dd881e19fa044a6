package desktop

import (
	"context"
	"net"
	"testing"
	"time"

	"ollie/broker"
)

// A socket sshd forwards from a host is open to every process of the
// host's user: only a request with the registration's key is put to a
// person. One without it, or with another, is closed unanswered, and
// nobody is asked, for approval or a password.
func TestServeConnKeyed(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, c := range []struct {
		name   string
		sent   []byte
		answer bool
	}{
		{"no key", nil, false},
		{"another key", []byte("fedcba9876543210fedcba9876543210"), false},
		{"a prefix of the key", key[:16], false},
		{"the key", key, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &holder{}
			b := &Broker{Approver: h}
			hostEnd, desk := net.Pipe()
			served := make(chan struct{})
			go func() {
				defer close(served)
				b.ServeConnKeyed("web1", desk, key)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req := &broker.Request{Session: "s", Tool: "fix", Sudo: true}
			cv, ans, err := broker.AskKeyed(ctx, hostEnd, req, c.sent)
			if !c.answer {
				if err == nil {
					t.Fatalf("answered %+v", ans)
				}
				waitServed(t, served, 5*time.Second, "a request without the key")
				if n := h.approvals.Load() + h.passwords.Load(); n != 0 {
					t.Errorf("a person was asked %d times", n)
				}
				if r := b.Refused("web1"); r.Keyless != 1 {
					t.Errorf("refusals %+v, want one keyless", r)
				}
				return
			}
			if err != nil || ans.Decision != broker.Once {
				t.Fatalf("with the key: %+v %v", ans, err)
			}
			pw, err := cv.Password(ctx, 1, "")
			if err != nil || string(pw) != "hunter2" {
				t.Fatalf("password with the key: %q %v", pw, err)
			}
			cv.Close("ran")
			waitServed(t, served, 5*time.Second, "the conversation ended")
			if r := b.Refused("web1"); r != (Refusals{}) {
				t.Errorf("refusals %+v", r)
			}
		})
	}
}
