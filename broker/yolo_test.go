package broker

import (
	"strings"
	"testing"
	"time"
)

// TestGateYolo: a request to create a yolo session is never parked. With
// no desktop broker the host's policy decides (allowed by default, as
// only the admin asks); yolo=deny refuses it without asking anyone; a
// connected desktop is asked, and its answer stands.
func TestGateYolo(t *testing.T) {
	yolo := func() *Request { return &Request{Session: "wild", Cwd: "/srv", Yolo: true} }

	l := newLab(t, false)
	if !l.gate.Policy().YoloAllowed() {
		t.Fatalf("the default host policy %q forbids yolo sessions", l.gate.Policy())
	}
	if _, ans, err := l.ask(t, yolo()); err != nil || ans.Decision != Once {
		t.Errorf("no broker, yolo=allow: %+v %v", ans, err)
	}
	if n := len(l.gate.Pending()); n != 0 {
		t.Errorf("%d requests parked", n)
	}
	p, _ := ParseHostPolicy("yolo=deny", l.gate.Policy())
	l.gate.SetPolicy(p)
	if _, ans, _ := l.ask(t, yolo()); ans.Decision != Deny || !strings.Contains(ans.Reason, "yolo=deny") {
		t.Errorf("no broker, yolo=deny: %+v", ans)
	}

	l = newLab(t, true)
	l.gate.SetPolicy(p)
	if _, ans, _ := l.ask(t, yolo()); ans.Decision != Deny || len(l.desk.asked) != 0 {
		t.Errorf("yolo=deny with a desktop: %+v, the desktop asked %d times", ans, len(l.desk.asked))
	}
	p, _ = ParseHostPolicy("yolo=allow", p)
	l.gate.SetPolicy(p)
	// The host's other fields are not part of a yolo request.
	claim := yolo()
	claim.Tool, claim.Sudo, claim.Executable = "system_logs", true, "/bin/sh"
	cv, ans, err := l.ask(t, claim)
	if err != nil || ans.Decision != Once {
		t.Fatalf("desktop approves: %+v %v", ans, err)
	}
	cv.Close("created")
	if len(l.desk.asked) != 1 {
		t.Fatalf("the desktop was asked %d times", len(l.desk.asked))
	}
	if got := l.desk.asked[0]; !got.Yolo || got.Tool != YoloTool || got.Sudo || got.Executable != "" || got.Session != "wild" || got.Host != "web1" {
		t.Errorf("the desktop saw %+v", got)
	}
	l.desk.decision = Deny
	if _, ans, _ := l.ask(t, yolo()); ans.Decision != Deny {
		t.Errorf("desktop denies: %+v", ans)
	}
}

// TestPolicyYolo: the desktop's policy forbids yolo sessions per host by
// naming YoloTool or any tool, and allows one only by naming both the
// host and YoloTool, as for sudo.
func TestPolicyYolo(t *testing.T) {
	pol, err := ParsePolicy("p.yaml", []byte(`rules:
  - host: "prod*"
    tool: "*"
    decision: deny
  - host: lab1
    tool: yolo-session
    decision: allow
  - host: "lab*"
    tool: "*"
    decision: allow
  - host: "qa*"
    tool: yolo-session
    decision: deny
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want Decision
		ok   bool
	}{
		{"prod3", Deny, true},
		{"lab1", Once, true},
		{"lab2", "", false}, // a wildcard allow does not apply: a person is asked
		{"qa1", Deny, true},
		{"dev", "", false},
	} {
		d, _, ok := pol.Match(&Request{Host: tc.host, Session: "s", Tool: YoloTool, Yolo: true})
		if d != tc.want || ok != tc.ok {
			t.Errorf("yolo on %s: %q %v, want %q %v", tc.host, d, ok, tc.want, tc.ok)
		}
	}
}

func TestPromptYolo(t *testing.T) {
	req := &Request{ID: "r1", Host: "h1", Session: "wild", Cwd: "/srv", Tool: YoloTool, Yolo: true}
	p := req.Prompt()
	for _, want := range []string{"ollie: h1 asks to create a yolo session: all its tools run outside the sandbox, without approval\n",
		"  session:  wild\n", "  in:       /srv\n"} {
		if !strings.Contains(p, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, p)
		}
	}
	if alwaysLabel(req) != "Always (yolo-session on h1)" {
		t.Errorf("always label %q", alwaysLabel(req))
	}
	p2, err := ParseHostPolicy("yolo=deny", HostPolicy{NoBroker: Park, Timeout: time.Minute, Yolo: YoloAllow})
	if err != nil || p2.YoloAllowed() || p2.String() != "nobroker=pending timeout=1m0s yolo=deny\n" {
		t.Errorf("yolo=deny: %q %v", p2, err)
	}
	if (HostPolicy{}).YoloAllowed() {
		t.Error("the zero host policy allows yolo sessions")
	}
	if _, err := ParseHostPolicy("yolo=maybe", p2); err == nil {
		t.Error("yolo=maybe accepted")
	}
}
