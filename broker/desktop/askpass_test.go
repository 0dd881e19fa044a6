package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/broker"
	"ollie/internal/await"
)

// scriptFile writes an executable shell script into dir.
func scriptFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func askRequest(sudo bool) *broker.Request {
	return &broker.Request{
		ID: "req-1", Host: "db3", Session: "s1", Agent: "ops", Tool: "system_logs",
		Variant: 0, Executable: "/usr/bin/dmesg", Args: json.RawMessage(`{"lines": "10"}`),
		Cwd: "/home/ops", Sudo: sudo,
	}
}

func fileText(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAskpassApprove(t *testing.T) {
	dir := t.TempDir()
	// The script records its argument and the confirm variable, and
	// answers as ANSWER says: an exit status, and optionally a word.
	rec := filepath.Join(dir, "rec")
	prog := scriptFile(t, dir, "askpass", `
printf '%s' "$1" > "`+rec+`.arg"
printf '%s' "${SSH_ASKPASS_PROMPT-unset}" > "`+rec+`.mode"
[ -n "$WORD" ] && echo "$WORD"
exit "$STATUS"
`)
	req := askRequest(true)
	for _, tc := range []struct {
		status, word string
		want         broker.Decision
	}{
		{"0", "", broker.Once},
		{"1", "", broker.Deny},
		{"0", "always", broker.Always},
		{"1", "always", broker.Deny}, // a word never turns a refusal into approval
		{"0", "sure", broker.Once},
	} {
		t.Setenv("STATUS", tc.status)
		t.Setenv("WORD", tc.word)
		ans, err := (&AskpassApprover{Program: prog}).Approve(context.Background(), req)
		if err != nil {
			t.Fatalf("status %s word %q: %v", tc.status, tc.word, err)
		}
		if ans.Decision != tc.want {
			t.Errorf("status %s word %q: decision %q, want %q", tc.status, tc.word, ans.Decision, tc.want)
		}
		if ans.Decision == broker.Deny && ans.Reason == "" {
			t.Errorf("a denial without a reason for the model")
		}
		if got := fileText(t, rec+".arg"); got != req.Prompt() {
			t.Errorf("askpass argument %q, want the prompt %q", got, req.Prompt())
		}
		if got := fileText(t, rec+".mode"); got != "confirm" {
			t.Errorf("SSH_ASKPASS_PROMPT=%q, want confirm", got)
		}
	}
}

func TestAskpassPassword(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec")
	prog := scriptFile(t, dir, "askpass", `
printf '%s' "$1" > "`+rec+`.arg"
printf '%s' "${SSH_ASKPASS_PROMPT-unset}" > "`+rec+`.mode"
read line; printf '%s' "$line" > "`+rec+`.stdin"
printf "$SECRET"
exit "$STATUS"
`)
	// An inherited confirm mode would turn a password prompt into a yes/no.
	t.Setenv("SSH_ASKPASS_PROMPT", "confirm")
	req := askRequest(true)
	for _, tc := range []struct {
		printed, status string
		want            string
	}{
		{`hunter2\n`, "0", "hunter2"},
		{`with trailing space \n`, "0", "with trailing space "},
		{`two newlines\n\n`, "0", "two newlines\n"},
		{`no newline`, "0", "no newline"},
		{`\n`, "0", ""},
	} {
		t.Setenv("SECRET", tc.printed)
		t.Setenv("STATUS", tc.status)
		pw, err := (&AskpassApprover{Program: prog}).Password(context.Background(), req, 2, "wrong password")
		if err != nil {
			t.Fatalf("%q: %v", tc.printed, err)
		}
		if string(pw) != tc.want {
			t.Errorf("printed %q: password %q, want %q", tc.printed, pw, tc.want)
		}
		if got, want := fileText(t, rec+".arg"), req.PasswordPrompt(2, "wrong password"); got != want {
			t.Errorf("askpass argument %q, want %q", got, want)
		}
		if got := fileText(t, rec+".mode"); got != "unset" {
			t.Errorf("SSH_ASKPASS_PROMPT=%q in password mode, want it unset", got)
		}
		if got := fileText(t, rec+".stdin"); got != "" {
			t.Errorf("askpass read %q from its stdin, want nothing", got)
		}
	}

	t.Setenv("SECRET", `hunter2\n`)
	t.Setenv("STATUS", "1")
	pw, err := (&AskpassApprover{Program: prog}).Password(context.Background(), req, 1, "")
	if !errors.Is(err, broker.ErrDenied) || pw != nil {
		t.Fatalf("cancelled askpass: %q, %v; want nil, ErrDenied", pw, err)
	}
}

func TestAskpassFailures(t *testing.T) {
	dir := t.TempDir()
	req := askRequest(true)

	_, err := (&AskpassApprover{Program: filepath.Join(dir, "missing")}).Approve(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing program: %v, want an error naming it", err)
	}

	big := scriptFile(t, dir, "big", `head -c 5000 /dev/zero | tr '\0' x`)
	_, err = (&AskpassApprover{Program: big}).Password(context.Background(), req, 1, "")
	if !errors.Is(err, ErrHelperOutput) {
		t.Errorf("5000 bytes of password: %v, want ErrHelperOutput", err)
	}

	killed := scriptFile(t, dir, "killed", `kill -9 $$`)
	_, err = (&AskpassApprover{Program: killed}).Approve(context.Background(), req)
	if err == nil {
		t.Errorf("askpass killed by a signal: no error")
	}
}

// TestAskpassCancel checks that ending the context ends the askpass and
// what it started, rather than leaving a dialog behind.
func TestAskpassCancel(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	prog := scriptFile(t, dir, "slow", `
sleep 60 &
echo $! > "`+pidFile+`.tmp"; mv "`+pidFile+`.tmp" "`+pidFile+`"
wait
`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := (&AskpassApprover{Program: prog}).Password(ctx, askRequest(true), 1, "")
		done <- err
	}()
	pid := waitForPid(t, pidFile)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Password did not return after its context was cancelled")
	}
	await.Until(t, 2*time.Second, fmt.Sprintf("the askpass's child %d to end with the cancelled request", pid),
		func() bool { return syscall.Kill(pid, 0) != nil })
}

func waitForPid(t *testing.T, p string) int {
	t.Helper()
	var b []byte
	await.Until(t, 10*time.Second, p+" to appear", func() bool {
		var err error
		b, err = os.ReadFile(p)
		return err == nil
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestAskpassProgram(t *testing.T) {
	for _, tc := range []struct {
		ollie, ssh, display, wayland string
		want                         string
	}{
		{"/o", "/s", "", "", "/o"},
		{"/o", "/s", ":0", "", "/o"},
		{"", "/s", "", "", ""},
		{"", "/s", ":0", "", "/s"},
		{"", "/s", "", "wayland-0", "/s"},
		{"", "", ":0", "", ""},
	} {
		t.Setenv("OLLIE_ASKPASS", tc.ollie)
		t.Setenv("SSH_ASKPASS", tc.ssh)
		t.Setenv("DISPLAY", tc.display)
		t.Setenv("WAYLAND_DISPLAY", tc.wayland)
		if got := AskpassProgram(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc, got, tc.want)
		}
	}
}
