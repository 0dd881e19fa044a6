package wire

import (
	"strings"
	"testing"
)

// TestLastAnswer: the last assistant message with text wins, whatever
// follows it; a long one is cut on a character's boundary.
func TestLastAnswer(t *testing.T) {
	log := strings.Join([]string{
		`{"role":"user","content":"check disks"}`,
		`{"role":"assistant","content":"first"}`,
		`{"role":"assistant","content":"  the answer  "}`,
		`{"role":"assistant","content":"","tool_calls":[{"name":"df"}]}`,
		`{"role":"tool","content":"42%"}`,
		`not json`,
	}, "\n")
	if got := LastAnswer([]byte(log), 100); got != "the answer" {
		t.Errorf("LastAnswer = %q, want %q", got, "the answer")
	}
	if got := LastAnswer([]byte(`{"role":"assistant","content":"héllo"}`), 2); got != "h" {
		t.Errorf("cut inside é: %q, want %q", got, "h")
	}
	if got := LastAnswer([]byte(`{"role":"user","content":"x"}`), 10); got != "" {
		t.Errorf("no answer: %q", got)
	}
}

// TestNewAgent: a value with a space stays one word to the host.
func TestNewAgent(t *testing.T) {
	if got := NewAgent("a", "", ""); got != "name='a'" {
		t.Errorf("NewAgent = %q", got)
	}
	if got := NewAgent("a", "ops", "qwen 7b"); got != "name='a' profile='ops' model='qwen 7b'" {
		t.Errorf("NewAgent = %q", got)
	}
}
