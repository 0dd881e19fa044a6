package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// Refusal and best effort, for kernels this machine is not.
func TestCheck(t *testing.T) {
	tcp := &Policy{Profile: "tcp"}                                                     // TCP denied: needs ABI 4
	noNet := &Policy{Profile: "fs", Bind: Ports{Any: true}, Connect: Ports{Any: true}} // needs ABI 3
	be := func(p *Policy) *Policy { q := *p; q.BestEffort = true; return &q }

	for _, tt := range []struct {
		name  string
		abi   int
		p     *Policy
		err   error
		level Level
		msg   string
	}{
		{"no landlock", 0, tcp, ErrNoLandlock, Unenforced, "set best_effort: true in profile tcp to run tools unsandboxed"},
		{"no landlock, fs only", 0, noNet, ErrNoLandlock, Unenforced, "ABI 3 or newer"},
		{"no landlock, best effort", 0, be(tcp), nil, Unenforced, ""},
		{"ABI 2", 2, noNet, ErrABITooOld, Partial, "truncating files is not restricted (needs ABI 3, kernel has 2)"},
		{"ABI 3, TCP", 3, tcp, ErrABITooOld, Partial, "TCP bind and connect are not restricted (needs ABI 4, kernel has 3) (use a kernel with Landlock ABI 4 or newer, or set best_effort: true in profile tcp to run tools partially sandboxed)"},
		{"ABI 3, TCP, best effort", 3, be(tcp), nil, Partial, ""},
		{"ABI 3, no TCP rules", 3, noNet, nil, Full, ""},
		{"ABI 4", 4, tcp, nil, Full, ""},
		{"ABI 7", 7, tcp, nil, Full, ""},
		{"ABI 7, best effort", 7, be(tcp), nil, Full, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := check(tt.abi, tt.p)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("check = %v, want %v", err, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q lacks %q", err, tt.msg)
			}
			e := enforcement(tt.abi, tt.p)
			if e.Level != tt.level {
				t.Errorf("level %v, want %v", e.Level, tt.level)
			}
			if e.Level != Full && !strings.Contains(e.String(), strings.ToUpper(e.Level.String())) {
				t.Errorf("enforcement %q does not say it loudly", e)
			}
		})
	}
	if e := enforcement(7, tcp); len(e.Extra) != 1 || !strings.Contains(e.Extra[0], "pathname Unix sockets") {
		t.Errorf("ABI 7 extra gaps: %q", e.Extra)
	}
}
