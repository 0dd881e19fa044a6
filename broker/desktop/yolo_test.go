package desktop

import (
	"testing"

	"ollie/broker"
)

// TestPolicyYolo: the desktop's policy forbids yolo sessions per host by
// naming broker.YoloTool or any tool, and allows one only by naming both
// the host and broker.YoloTool, as for sudo.
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
		want broker.Decision
		ok   bool
	}{
		{"prod3", broker.Deny, true},
		{"lab1", broker.Once, true},
		{"lab2", "", false}, // a wildcard allow does not apply: a person is asked
		{"qa1", broker.Deny, true},
		{"dev", "", false},
	} {
		d, _, ok := pol.Match(&broker.Request{Host: tc.host, Session: "s", Tool: broker.YoloTool, Yolo: true})
		if d != tc.want || ok != tc.ok {
			t.Errorf("yolo on %s: %q %v, want %q %v", tc.host, d, ok, tc.want, tc.ok)
		}
	}
}

// TestAlwaysLabelYolo: the dialog's "always" button names what it allows,
// the yolo tool on the connection's host.
func TestAlwaysLabelYolo(t *testing.T) {
	req := &broker.Request{ID: "r1", Host: "h1", Session: "wild", Cwd: "/srv", Tool: broker.YoloTool, Yolo: true}
	if alwaysLabel(req) != "Always (yolo-session on h1)" {
		t.Errorf("always label %q", alwaysLabel(req))
	}
}
