package gate_test

import (
	"strings"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/gate"
)

// TestGateYolo: a request to create a yolo session is never parked. With
// no desktop broker the host's policy decides (allowed by default, as
// only the admin asks); yolo=deny refuses it without asking anyone; a
// connected desktop is asked, and its answer stands.
func TestGateYolo(t *testing.T) {
	yolo := func() *broker.Request { return &broker.Request{Session: "wild", Cwd: "/srv", Yolo: true} }

	l := newLab(t, false)
	if !l.gate.Policy().YoloAllowed() {
		t.Fatalf("the default host policy %q forbids yolo sessions", l.gate.Policy())
	}
	if _, ans, err := l.ask(t, yolo()); err != nil || ans.Decision != broker.Once {
		t.Errorf("no broker, yolo=allow: %+v %v", ans, err)
	}
	if n := len(l.gate.Pending()); n != 0 {
		t.Errorf("%d requests parked", n)
	}
	p, _ := gate.ParseHostPolicy("yolo=deny", l.gate.Policy())
	l.gate.SetPolicy(p)
	if _, ans, _ := l.ask(t, yolo()); ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "yolo=deny") {
		t.Errorf("no broker, yolo=deny: %+v", ans)
	}

	l = newLab(t, true)
	l.gate.SetPolicy(p)
	if _, ans, _ := l.ask(t, yolo()); ans.Decision != broker.Deny || len(l.desk.asked) != 0 {
		t.Errorf("yolo=deny with a desktop: %+v, the desktop asked %d times", ans, len(l.desk.asked))
	}
	p, _ = gate.ParseHostPolicy("yolo=allow", p)
	l.gate.SetPolicy(p)
	// The host's other fields are not part of a yolo request.
	claim := yolo()
	claim.Tool, claim.Sudo, claim.Executable = "system_logs", true, "/bin/sh"
	cv, ans, err := l.ask(t, claim)
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("desktop approves: %+v %v", ans, err)
	}
	cv.Close("created")
	if len(l.desk.asked) != 1 {
		t.Fatalf("the desktop was asked %d times", len(l.desk.asked))
	}
	if got := l.desk.asked[0]; !got.Yolo || got.Tool != broker.YoloTool || got.Sudo || got.Executable != "" || got.Session != "wild" || got.Host != "web1" {
		t.Errorf("the desktop saw %+v", got)
	}
	l.desk.decision = broker.Deny
	if _, ans, _ := l.ask(t, yolo()); ans.Decision != broker.Deny {
		t.Errorf("desktop denies: %+v", ans)
	}
}

func TestPromptYolo(t *testing.T) {
	req := &broker.Request{ID: "r1", Host: "h1", Session: "wild", Cwd: "/srv", Tool: broker.YoloTool, Yolo: true}
	p := req.Prompt()
	for _, want := range []string{"ollie: h1 asks to create a yolo session: all its tools run outside the sandbox, without approval\n",
		"  h1 says:\n    session:  \"wild\"\n", "    in:       \"/srv\"\n"} {
		if !strings.Contains(p, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, p)
		}
	}
	p2, err := gate.ParseHostPolicy("yolo=deny", gate.HostPolicy{NoBroker: gate.Park, Timeout: time.Minute, Yolo: gate.YoloAllow})
	if err != nil || p2.YoloAllowed() || p2.String() != "nobroker=pending timeout=1m0s yolo=deny\n" {
		t.Errorf("yolo=deny: %q %v", p2, err)
	}
	if (gate.HostPolicy{}).YoloAllowed() {
		t.Error("the zero host policy allows yolo sessions")
	}
	if _, err := gate.ParseHostPolicy("yolo=maybe", p2); err == nil {
		t.Error("yolo=maybe accepted")
	}
}
