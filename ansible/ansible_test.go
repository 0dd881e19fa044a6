package ansible

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ollie/broker"
)

func TestParseGoalArgs(t *testing.T) {
	args := `{"goal": "g", "timeout": 5, "policy": {"allow": ["a"], "sudo": true},
		"_ollie_password_stdin": true, "_ansible_check_mode": false}`
	a, err := ParseGoalArgs([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	if a.Goal != "g" || a.Timeout != 5 || !bool(a.Policy.Sudo) || !slices.Equal(a.Policy.Allow, []string{"a"}) || !bool(a.PasswordStdin) || a.PasswordInFile {
		t.Errorf("parsed %+v", a)
	}
	// Templated values reach the module as strings.
	a, err = ParseGoalArgs([]byte(`{"goal": "g", "timeout": "7", "policy": {"sudo": "False"}, "_ansible_check_mode": "True"}`))
	if err != nil || a.Timeout != 7 || bool(a.Policy.Sudo) || !bool(a.CheckMode) || bool(a.PasswordStdin) {
		t.Errorf("templated strings: %+v, %v", a, err)
	}
	if _, err := ParseGoalArgs([]byte(`{"goal": "g", "policy": {"sudo": "maybe"}}`)); err == nil {
		t.Error("sudo: maybe: no error")
	}
	if _, err := ParseGoalArgs([]byte(`{"timeout": 5}`)); err == nil {
		t.Error("no goal: no error")
	}
}

// A become_password in the arguments file went through the disk: it is
// ignored, and reported so that the file is scrubbed.
func TestParseGoalArgsIgnoresFilePassword(t *testing.T) {
	b := []byte(`{"goal": "g", "become_password": "s3cret-in-file"}`)
	a, err := ParseGoalArgs(b)
	if err != nil {
		t.Fatal(err)
	}
	if !a.PasswordInFile || a.BecomePassword != nil {
		t.Errorf("PasswordInFile %v, BecomePassword %q: want true, nil", a.PasswordInFile, a.BecomePassword)
	}
}

func TestReadPassword(t *testing.T) {
	pw, err := ReadPassword(strings.NewReader("p\"\\é😀x\n\t"))
	if err != nil || string(pw) != "p\"\\é😀x\n\t" {
		t.Errorf("read %q, %v", pw, err)
	}
	if cap(pw) != len(pw) {
		t.Errorf("cap %d > len %d: an append could copy the password", cap(pw), len(pw))
	}
	if _, err := ReadPassword(strings.NewReader(strings.Repeat("x", maxPassword+1))); err == nil {
		t.Errorf("a password over %d bytes: no error", maxPassword)
	}
	if pw, err := ReadPassword(strings.NewReader(strings.Repeat("x", maxPassword))); err != nil || len(pw) != maxPassword {
		t.Errorf("a password of %d bytes: %d, %v", maxPassword, len(pw), err)
	}
}

func TestScrubArgsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "args")
	os.WriteFile(p, []byte(`{"goal": "g", "become_password": "secret"}`), 0600)
	b, err := ReadArgsFile(p)
	if err != nil || !strings.Contains(string(b), "secret") {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("ReadArgsFile removed the file: %v", err)
	}
	ScrubArgsFile(p)
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the arguments file is still there: %v", err)
	}
}

func TestPolicyDecisions(t *testing.T) {
	a := &Broker{Policy: Policy{Allow: []string{"fetch", "root_id"}, Sudo: false}}
	star := &Broker{Policy: Policy{Allow: []string{"*"}, Sudo: true}}
	for _, c := range []struct {
		a      *Broker
		req    broker.Request
		want   broker.Decision
		reason string
	}{
		{a, broker.Request{Tool: "fetch"}, broker.Once, ""},
		{a, broker.Request{Tool: "peek"}, broker.Deny, "does not let peek leave the sandbox"},
		{a, broker.Request{Tool: "root_id", Sudo: true}, broker.Deny, "does not allow sudo"},
		{star, broker.Request{Tool: "root_id", Sudo: true}, broker.Once, ""},
		{star, broker.Request{Tool: broker.YoloTool, Yolo: true}, broker.Deny, "yolo"},
	} {
		ans := c.a.decide(&c.req)
		if ans.Decision != c.want || !strings.Contains(ans.Reason, c.reason) {
			t.Errorf("%+v: %+v, want %s (%q)", c.req, ans, c.want, c.reason)
		}
	}
}

// The approver over a real Unix socket, as the gate asks it: its own
// session's sudo request gets the password once, a second ask (sudo
// refused it) is denied; another session's request is left unanswered,
// and so is one without the registration's key (any process of the user
// can connect: a tool asking for the become password).
func TestApproverServes(t *testing.T) {
	dir, err := os.MkdirTemp("", "ans")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	ap := &Broker{Policy: Policy{Allow: []string{"root_id"}, Sudo: true}, Session: "S1", Password: []byte("pw"), Key: slices.Clone(key)}
	go ap.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func() net.Conn {
		c, err := net.Dial("unix", filepath.Join(dir, "b"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	for _, k := range [][]byte{nil, []byte("fedcba9876543210fedcba9876543210")} {
		if cv, ans, err := broker.AskKeyed(ctx, dial(), &broker.Request{Session: "S1", Tool: "root_id", Sudo: true}, k); !errors.Is(err, io.EOF) {
			t.Errorf("a request with key %q: %+v %v, want it closed unanswered", k, ans, err)
			if cv != nil {
				cv.Password(ctx, 1, "")
				cv.Close("ran")
			}
		}
	}
	cv, ans, err := broker.AskKeyed(ctx, dial(), &broker.Request{Session: "S1", Tool: "root_id", Sudo: true}, key)
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("answer %+v, %v", ans, err)
	}
	pw, err := cv.Password(ctx, 1, "")
	if err != nil || string(pw) != "pw" {
		t.Fatalf("password %q, %v", pw, err)
	}
	if _, err := cv.Password(ctx, 2, "wrong password"); !errors.Is(err, broker.ErrDenied) || !strings.Contains(err.Error(), "refused the play's become password") {
		t.Errorf("a second ask: %v", err)
	}
	cv.Close("no password")

	if cv, _, err := broker.AskKeyed(ctx, dial(), &broker.Request{Session: "S2", Tool: "root_id"}, key); !errors.Is(err, io.EOF) {
		t.Errorf("another session's request: %v, want it closed unanswered", err)
		if cv != nil {
			cv.Close("ran")
		}
	}
	l.Close()
	ap.Close()
	got := ap.Approvals()
	if len(got) != 1 || got[0].Decision != "deny" || got[0].Result != "no password" {
		t.Errorf("approvals %+v", got)
	}
	if string(ap.Password) != "\x00\x00" {
		t.Errorf("the password was not zeroed: %q", ap.Password)
	}
}

func TestSyncData(t *testing.T) {
	root := t.TempDir()
	mk := func(files map[string]string) string {
		p := filepath.Join(t.TempDir(), "d.tar")
		f, _ := os.Create(p)
		tw := tar.NewWriter(f)
		for _, name := range []string{"tools/", "tools/a", "tools/a.meta", "skills/", "skills/x"} {
			content, ok := files[name]
			if !ok {
				continue
			}
			if strings.HasSuffix(name, "/") {
				tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0755})
				continue
			}
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0755, Size: int64(len(content))})
			tw.Write([]byte(content))
		}
		tw.Close()
		f.Close()
		return p
	}
	v1 := mk(map[string]string{"tools/": "", "tools/a": "A", "tools/a.meta": "{}", "skills/": "", "skills/x": "X"})
	if ch, err := SyncData(root, v1); err != nil || len(ch) != 5 {
		t.Fatalf("first: %v, %v", ch, err)
	}
	if ch, err := SyncData(root, v1); err != nil || len(ch) != 0 {
		t.Fatalf("again: %v, %v", ch, err)
	}
	v2 := mk(map[string]string{"tools/": "", "tools/a": "B", "tools/a.meta": "{}"})
	ch, err := SyncData(root, v2)
	if err != nil || !slices.Equal(ch, []string{"data/tools/a", "removed data/skills"}) {
		t.Fatalf("v2: %v, %v", ch, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "data/tools/a")); string(b) != "B" {
		t.Errorf("tools/a holds %q", b)
	}
	bad := filepath.Join(t.TempDir(), "bad.tar")
	f, _ := os.Create(bad)
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0644})
	tw.Close()
	f.Close()
	if _, err := SyncData(root, bad); err == nil {
		t.Error("a name leaving data/ was taken")
	}
}
