package gate_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/gate"
)

// The gate counts a request's password asks itself, on both paths (relayed
// to a desktop, and parked for the admin at the host), whatever numbers the
// asker puts on them: a password ask must be numbered exactly the next one,
// and none is taken past the third. The asker here is what the gate admits,
// a process of this user that is not sandboxed and runs the trusted
// executable (the test binary, as TrustExe), on the gate's real Unix
// socket; it numbers its asks as an attacker would.

// attacks are the numberings an asker puts on its password asks, and how
// many of each the person (the desktop, or the admin at the host) must be
// asked: the honest prefix, at most three.
// maxAttempts is the promise (broker's TestMaxPasswordAttemptsIsThree).
const maxAttempts = 3

var attacks = []struct {
	name     string
	attempts []int
	asked    int
}{
	{"ask 1 again and again", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1},
	{"1 2 3 4", []int{1, 2, 3, 4}, maxAttempts},
	{"1 2 3 then 1", []int{1, 2, 3, 1, 1}, maxAttempts},
	{"skip to 3", []int{3}, 0},
	{"1 then 3", []int{1, 3}, 1},
}

// attackGate is a gate that trusts this test binary, on a real socket in a
// fresh directory, whose events go to notify.
func attackGate(t *testing.T) (g *gate.Gate, sock string, notify chan string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	notify = make(chan string, 100)
	g = gate.New(nil)
	g.TrustExe = self
	g.Publish = func(topic, data string) { notify <- topic + " " + data }
	sock = filepath.Join(t.TempDir(), "elevate")
	gl, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	go g.Serve(gl)
	return g, sock, notify
}

// attack asks for the password with each number in attempts in turn, as
// long as the gate gives one, and returns how the last ask ended: nil when
// every ask was given a password.
func attack(t *testing.T, cv *broker.Conversation, attempts []int) (given int, refused error) {
	t.Helper()
	for _, attempt := range attempts {
		r := got(t, sudoAsks(cv, attempt, "wrong password"))
		if r.err != nil {
			return given, r.err
		}
		broker.Zero(r.pw)
		given++
	}
	return given, nil
}

// checkRefused checks how the gate ended an attack that asked more than the
// person may be asked: with a denial that says what was wrong, after which
// the request takes no ask.
func checkRefused(t *testing.T, cv *broker.Conversation, given, asked int, refused error) {
	t.Helper()
	if given != asked {
		t.Errorf("the asker was given %d passwords, want %d", given, asked)
	}
	if !errors.Is(refused, broker.ErrDenied) {
		t.Errorf("the ask past the honest ones ended with %v: want it denied, saying why", refused)
	} else if msg := refused.Error(); !strings.Contains(msg, "password ask") {
		t.Errorf("the denial %q does not say the password ask was refused", msg)
	}
	r := got(t, sudoAsks(cv, asked+1, "wrong password"))
	if r.err == nil {
		t.Error("the request took a password ask after the gate refused one: it must end denied")
	}
}

// rawDesk is a desktop on a socket that approves and gives a password for
// every ask the gate relays, counting them: it counts nothing itself (as
// the real one does), so what it is asked is what the gate lets through.
type rawDesk struct {
	mu    sync.Mutex
	asked []int // the attempt numbers relayed
}

func startRawDesk(t *testing.T, path string) *rawDesk {
	t.Helper()
	d := &rawDesk{}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.serve(c)
		}
	}()
	return d
}

func (d *rawDesk) serve(c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := broker.Receive(ctx, c)
	if err != nil || in.Answer(broker.Answer{Decision: broker.Once}) != nil {
		return
	}
	for {
		attempt, _, _, err := in.Next(ctx)
		if err != nil || attempt == 0 {
			return
		}
		d.mu.Lock()
		d.asked = append(d.asked, attempt)
		d.mu.Unlock()
		if in.Secret([]byte("pw-"+strconv.Itoa(attempt))) != nil {
			return
		}
	}
}

func (d *rawDesk) count() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked)
}

// TestGateCountsPasswordAsksRelayed: relayed to a desktop that gives a
// password each time it is asked, the gate asks it at most three times a
// request, and only for asks numbered in turn.
func TestGateCountsPasswordAsksRelayed(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			g, sock, _ := attackGate(t)
			desk := startRawDesk(t, filepath.Join(filepath.Dir(sock), "broker"))
			if err := g.Register(filepath.Join(filepath.Dir(sock), "broker")); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cv, ans, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "fix_nginx", Sudo: true})
			if err != nil || ans.Decision != broker.Once {
				t.Fatalf("answer %+v %v", ans, err)
			}
			defer cv.Close("not run")
			given, refused := attack(t, cv, a.attempts)
			checkRefused(t, cv, given, a.asked, refused)
			asked := desk.count()
			if len(asked) > maxAttempts {
				t.Fatalf("the desktop was asked for the password %d times for one request (asks %v): at most %d", len(asked), asked, maxAttempts)
			}
			if len(asked) != a.asked {
				t.Errorf("the desktop was asked %d times (asks %v), want %d", len(asked), asked, a.asked)
			}
			for i, n := range asked {
				if n != i+1 {
					t.Errorf("the desktop's ask %d was numbered %d", i+1, n)
				}
			}
		})
	}
}

// TestGateCountsPasswordAsksAtHost: parked in bypass/pending, approved
// there, and given a password by the admin each time the gate asks, the
// admin is asked at most three times a request, and only for asks
// numbered in turn.
func TestGateCountsPasswordAsksAtHost(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			g, sock, notify := attackGate(t)
			req := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "fix", Sudo: true}
			type asked struct {
				cv  *broker.Conversation
				err error
			}
			approved := make(chan asked, 1)
			go func() {
				c, err := net.Dial("unix", sock)
				if err != nil {
					approved <- asked{nil, err}
					return
				}
				cv, ans, err := broker.Ask(context.Background(), c, req)
				if err == nil && ans.Decision != broker.Once {
					err = errors.New("not approved: " + ans.Reason)
				}
				approved <- asked{cv, err}
			}()

			// The admin: approves the request, then writes a password
			// each time the gate says sudo asks for one.
			var mu sync.Mutex
			var admin []string // the bypass.password events answered
			done := make(chan struct{})
			adminDone := make(chan struct{})
			t.Cleanup(func() { close(done); <-adminDone })
			go func() {
				defer close(adminDone)
				for {
					select {
					case ev := <-notify:
						switch {
						case ev == "bypass.pending "+req.ID+" fix":
							if err := g.Decide(req.ID, "approve"); err != nil {
								t.Error(err)
							}
						case strings.HasPrefix(ev, "bypass.password "+req.ID+" "):
							mu.Lock()
							admin = append(admin, ev)
							mu.Unlock()
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							err := g.Password(ctx, req.ID, []byte("hunter2"))
							cancel()
							if err != nil {
								t.Logf("the admin's password: %v", err)
							}
						}
					case <-done:
						return
					}
				}
			}()
			var r asked
			select {
			case r = <-approved:
			case <-time.After(10 * time.Second):
				t.Fatal("the request was not answered")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.cv.Close("not run")
			given, refused := attack(t, r.cv, a.attempts)
			checkRefused(t, r.cv, given, a.asked, refused)
			mu.Lock()
			defer mu.Unlock()
			if len(admin) > maxAttempts {
				t.Fatalf("the admin was asked for the password %d times for one request (%q): at most %d", len(admin), admin, maxAttempts)
			}
			if len(admin) != a.asked {
				t.Errorf("the admin was asked %d times (%q), want %d", len(admin), admin, a.asked)
			}
			if _, listed := g.PendingText(req.ID); listed {
				t.Error("the request is still listed in bypass/pending after the gate refused its ask")
			}
		})
	}
}

// TestGateRefusesFourthAttempt has a session's toolsrv, as the gate sees
// it, ask a fourth time, first through a desktop and then at the host
// (bypass/pending): the gate relays nothing and lists nothing, and the
// asker gets no password.
func TestGateRefusesFourthAttempt(t *testing.T) {
	t.Run("relayed to the desktop", func(t *testing.T) {
		l := newLab(t, true)
		l.desk.passwords = []string{"pw1", "pw2", "pw3", "pw4"}
		cv, ans, err := l.ask(t, &broker.Request{Session: "s", Tool: "fix_nginx", Sudo: true})
		if err != nil || ans.Decision != broker.Once {
			t.Fatalf("answer %+v %v", ans, err)
		}
		defer cv.Close("not run")
		// The desktop counts its own asks, so a host's fourth is the
		// first it is asked for: the gate must refuse it itself.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pw, err := cv.Password(ctx, maxAttempts+1, "wrong password")
		if err == nil {
			t.Errorf("the gate gave a password for attempt %d: %q", maxAttempts+1, pw)
		}
		l.desk.mu.Lock()
		defer l.desk.mu.Unlock()
		if len(l.desk.pwAsked) != 0 {
			t.Errorf("the desktop was asked for the password of attempt %d", maxAttempts+1)
		}
	})

	t.Run("at the host", func(t *testing.T) {
		l := newPasswordLab(t)
		req := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "fix", Sudo: true}
		asked := l.askAsync(t, req)
		l.await(t, "bypass.pending "+req.ID+" fix")
		if err := l.gate.Decide(req.ID, "approve"); err != nil {
			t.Fatal(err)
		}
		cv := answered(t, asked)
		defer cv.Close("not run")
		ask := sudoAsks(cv, maxAttempts+1, "wrong password")
		fourth := "bypass.password " + req.ID + " " + strconv.Itoa(maxAttempts+1)
		for {
			select {
			case r := <-ask:
				if r.err == nil {
					t.Errorf("the gate gave a password for attempt %d", maxAttempts+1)
				}
				return
			case ev := <-l.notify:
				if ev == fourth {
					text, _ := l.gate.PendingText(req.ID)
					t.Fatalf("the gate asks at the host for attempt %d:\n%s", maxAttempts+1, text)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the asker got neither a refusal nor a password")
			}
		}
	})
}
