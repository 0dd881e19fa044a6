package desktop

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"ollie/broker"
)

func TestPolicyMatch(t *testing.T) {
	p, err := LoadPolicy("testdata/policy/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	req := func(host, tool string, sudo bool, args string) *broker.Request {
		r := &broker.Request{Host: host, Tool: tool, Sudo: sudo, Session: "s"}
		if args != "" {
			r.Args = json.RawMessage(args)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		req  *broker.Request
		want broker.Decision // "" means no rule applies
		line int
	}{
		{"literal allow for sudo", req("web1", "system_logs", true, ""), broker.Once, 5},
		{"literal allow, another host", req("web2", "system_logs", true, ""), "", 0},
		{"wildcard deny for sudo", req("db3", "system_logs", true, ""), broker.Deny, 9},
		{"deny is for sudo only", req("db3", "system_logs", false, ""), "", 0},
		{"args match, keys in any order and spacing", req("db3", "tail_log", false, `{"path": "/var/log/syslog", "lines": "20"}`), broker.Once, 14},
		{"args must match whole", req("web1", "tail_log", false, `{"lines":"20","path":"/var/log/syslog","follow":true}`), "", 0},
		{"args cannot climb out", req("web1", "tail_log", false, `{"lines":"20","path":"/var/log/../shadow"}`), "", 0},
		{"args absent", req("web1", "tail_log", false, ""), "", 0},
		{"wildcard allow, not sudo", req("lab-7", "anything", false, ""), broker.Once, 19},
		{"wildcard allow never allows sudo", req("lab-7", "anything", true, ""), "", 0},
		{"wildcard args allow never allows sudo", req("web1", "tail_log", true, `{"lines":"1","path":"/var/log/x"}`), "", 0},
		{"host omitted is any", req("web9", "rm_rf", false, ""), broker.Deny, 22},
		{"host omitted, sudo denied too", req("web9", "rm_rf", true, ""), broker.Deny, 22},
	} {
		d, r, ok := p.Match(tc.req)
		if d != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q, %v; want %q", tc.name, d, ok, tc.want)
			continue
		}
		if ok && r.Line != tc.line {
			t.Errorf("%s: rule at line %d, want line %d", tc.name, r.Line, tc.line)
		}
	}

	var nilPolicy *Policy
	if _, _, ok := nilPolicy.Match(req("web1", "x", false, "")); ok {
		t.Error("a nil policy matched")
	}
}

// TestPolicySudoNeverWildcard checks the invariant over every shape of
// pattern: an allow rule whose host or tool is not a single name never
// answers a sudo request.
func TestPolicySudoNeverWildcard(t *testing.T) {
	hosts := []string{"*", "web?", "web[12]", "w*1", `web\*`, "web1"}
	tools := []string{"*", "system_logs"}
	for _, h := range hosts {
		for _, tool := range tools {
			src := "rules:\n  - host: '" + h + "'\n    tool: '" + tool + "'\n    decision: allow\n"
			p, err := ParsePolicy("t.yaml", []byte(src))
			if err != nil {
				t.Fatalf("%s", err)
			}
			for _, host := range []string{"web1", "web*", "w1"} {
				d, _, ok := p.Match(&broker.Request{Host: host, Tool: "system_logs", Sudo: true})
				wild := tool == "*" || (h != "web1" && h != `web\*`)
				if ok && wild {
					t.Errorf("host %q tool %q allowed sudo on %s: %q", h, tool, host, d)
				}
			}
		}
	}
	// The escaped star is a literal name, and matches only itself.
	p, _ := ParsePolicy("t.yaml", []byte("rules:\n  - {host: 'web\\*', tool: t, decision: allow}\n"))
	if _, _, ok := p.Match(&broker.Request{Host: "web*", Tool: "t", Sudo: true}); !ok {
		t.Error(`host web\* did not allow sudo on the host named "web*"`)
	}
	if _, _, ok := p.Match(&broker.Request{Host: "web1", Tool: "t", Sudo: true}); ok {
		t.Error(`host web\* allowed sudo on web1`)
	}
}

func TestPolicyParseErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want string
	}{
		{"rules:\n  - host: web1\n    tools: x\n    decision: allow\n", `bad.yaml:3: rule 1: unknown field "tools"`},
		{"rules:\n  - host: web1\n    decision: allow\n  - host: '[web'\n    decision: deny\n", `bad.yaml:4: rule 2: host "[web" is not a valid glob`},
		{"rules:\n  - tool: x\n    args: '(unclosed'\n    decision: deny\n", `bad.yaml:2: rule 1: args "(unclosed" is not a valid regular expression`},
		{"rules:\n  - tool: x\n    decision: maybe\n", `bad.yaml:2: rule 1: decision "maybe" (want allow or deny)`},
		{"rules:\n  - tool: x\n", `bad.yaml:2: rule 1: no decision`},
		{"rules:\n  - host: '*'\n    tool: x\n    sudo: true\n    decision: allow\n", `bad.yaml:2: rule 1: an allow rule for sudo must name one host and one tool`},
		{"rules:\n  - host: web1\n    tool: '*'\n    sudo: true\n    decision: allow\n", `bad.yaml:2: rule 1: an allow rule for sudo must name one host and one tool`},
		{"rules:\n  - host: web1\n    sudo: maybe\n    decision: deny\n", `bad.yaml:2: rule 1: line 3: cannot unmarshal`},
		{"rules:\n  - host: web1\n    host: web2\n    decision: deny\n", `bad.yaml:3: rule 1: "host" given twice`},
		{"rule:\n  - host: web1\n", `bad.yaml:1: unknown field "rule"`},
		{"rules: web1\n", `bad.yaml:1: "rules" must be a list`},
		{"rules:\n  - web1\n", `bad.yaml:2: rule 1: want a mapping`},
		{"- host: web1\n", `bad.yaml:1: want a mapping with a "rules" list`},
		{"rules: []\n---\nrules: []\n", `bad.yaml:2: a second YAML document`},
		{"rules: [\n", `bad.yaml: yaml:`},
	} {
		_, err := ParsePolicy("bad.yaml", []byte(tc.src))
		if err == nil {
			t.Errorf("%q: parsed, want error %q", tc.src, tc.want)
			continue
		}
		if !errors.Is(err, broker.ErrPolicy) {
			t.Errorf("%q: %v is not ErrPolicy", tc.src, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %s", tc.src, err, tc.want)
		}
	}

	for _, src := range []string{"", "# nothing yet\n", "~\n", "rules:\n", "rules: []\n"} {
		p, err := ParsePolicy("empty.yaml", []byte(src))
		if err != nil || len(p.Rules()) != 0 {
			t.Errorf("%q: %v, %d rules; want an empty policy", src, err, len(p.Rules()))
		}
	}
}

func TestPolicyAddAlways(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config", "ollie")
	file := filepath.Join(dir, "broker-policy.yaml")
	p, err := LoadPolicy(file)
	if err != nil {
		t.Fatalf("a missing file: %v, want an empty policy", err)
	}
	req := &broker.Request{ID: "r1", Host: "db3", Tool: "system_logs", Sudo: true, Session: "s"}
	if _, _, ok := p.Match(req); ok {
		t.Fatal("an empty policy matched")
	}
	if err := p.AddAlways(req); err != nil {
		t.Fatal(err)
	}
	if d, _, ok := p.Match(req); !ok || d != broker.Once {
		t.Fatalf("after AddAlways: %q, %v; want once", d, ok)
	}
	for name, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, file: 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}

	// What was written is a policy a person can read, and reloads to the
	// same answer.
	again, err := LoadPolicy(file)
	if err != nil {
		t.Fatalf("reloading what AddAlways wrote: %v\n%s", err, fileText(t, file))
	}
	if d, _, ok := again.Match(req); !ok || d != broker.Once {
		t.Fatalf("reloaded: %q, %v; want once\n%s", d, ok, fileText(t, file))
	}

	// A person edits the file while the broker runs: the edit and its
	// comment survive the next AddAlways, and the same answer twice is
	// saved once.
	edited := fileText(t, file) + "  # added by hand\n  - host: web1\n    tool: uptime\n    decision: deny\n"
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.AddAlways(&broker.Request{ID: "r2", Host: "[::1]", Tool: "system_logs"}); err != nil {
		t.Fatal(err)
	}
	if err := p.AddAlways(req); err != nil {
		t.Fatal(err)
	}
	text := fileText(t, file)
	if !strings.Contains(text, "# added by hand") {
		t.Errorf("a comment written by hand was lost:\n%s", text)
	}
	rules := p.Rules()
	if len(rules) != 3 {
		t.Fatalf("%d rules, want 3 (db3, web1 by hand, [::1]):\n%s", len(rules), text)
	}
	if d, _, ok := p.Match(&broker.Request{Host: "web1", Tool: "uptime"}); !ok || d != broker.Deny {
		t.Errorf("the rule added by hand: %q, %v; want deny", d, ok)
	}
	// A host with glob characters is saved escaped: it is one name.
	if d, _, ok := p.Match(&broker.Request{Host: "[::1]", Tool: "system_logs", Sudo: true}); !ok || d != broker.Once {
		t.Errorf("[::1]: %q, %v; want once", d, ok)
	}
	if _, _, ok := p.Match(&broker.Request{Host: ":", Tool: "system_logs"}); ok {
		t.Errorf("the rule for [::1] matched the host \":\"")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d files in %s, want only the policy (no temporary left)", len(entries), dir)
	}

	// A file broken by hand is not overwritten.
	if err := os.WriteFile(file, []byte("rules:\n  - hots: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.AddAlways(&broker.Request{Host: "h", Tool: "t"}); !errors.Is(err, broker.ErrPolicy) {
		t.Errorf("AddAlways over a broken file: %v, want ErrPolicy", err)
	}
	if got := fileText(t, file); got != "rules:\n  - hots: x\n" {
		t.Errorf("the broken file was rewritten:\n%s", got)
	}

	for _, r := range []*broker.Request{{Host: "", Tool: "t"}, {Host: "h", Tool: ""}, {Host: "h", Tool: "*"}} {
		if err := p.AddAlways(r); err == nil {
			t.Errorf("AddAlways(host %q, tool %q) saved a rule", r.Host, r.Tool)
		}
	}
}

func TestPolicyAddAlwaysKeepsCommentOnlyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte("# my policy, empty for now\n"), 0o600)
	p, err := LoadPolicy(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddAlways(&broker.Request{Host: "h", Tool: "t"}); err != nil {
		t.Fatal(err)
	}
	if text := fileText(t, file); !strings.HasPrefix(text, "# my policy, empty for now\n") {
		t.Errorf("the comment was lost:\n%s", text)
	}
	if len(p.Rules()) != 1 {
		t.Errorf("%d rules, want 1", len(p.Rules()))
	}
}

// TestPolicyRefresh: a policy file edited while it is in use applies to
// the next request; a version that does not parse keeps the last good
// rules and says why until it is fixed; a removed file asks about
// everything.
func TestPolicyRefresh(t *testing.T) {
	file := filepath.Join(t.TempDir(), "broker-policy.yaml")
	write := func(text string) {
		t.Helper()
		// In place, as an editor that does not rename writes.
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	req := &broker.Request{Host: "web1", Tool: "tail_log"}
	write("rules:\n  - {host: web1, tool: tail_log, decision: allow}\n")
	pol, err := OpenPolicy(file)
	if err != nil {
		t.Fatal(err)
	}
	decide := func() broker.Decision {
		t.Helper()
		d, _, ok := pol.Match(req)
		if !ok {
			return ""
		}
		return d
	}
	if changed, err := pol.Refresh(); changed || err != nil {
		t.Errorf("Refresh of an unchanged file: %v, %v", changed, err)
	}
	if d := decide(); d != broker.Once {
		t.Fatalf("before the edit: %q, want once", d)
	}

	write("rules:\n  - {tool: tail_log, decision: deny}\n  - {host: web1, tool: tail_log, decision: allow}\n")
	if changed, err := pol.Refresh(); !changed || err != nil {
		t.Fatalf("Refresh after an edit: %v, %v", changed, err)
	}
	if d := decide(); d != broker.Deny {
		t.Errorf("after a deny rule was added: %q, want deny", d)
	}

	// Renamed over the old one with the same size, as most editors save.
	same := "rules:\n  - {tool: tail_log, decision: deny}\n  - {host: web1, tool: tail_lo?, decision: allow}\n"
	if err := writeFileAtomic(file, []byte(same)); err != nil {
		t.Fatal(err)
	}
	if changed, _ := pol.Refresh(); !changed {
		t.Error("a file renamed over the old one with the same size was not read again")
	}

	write("rules:\n  - {tool: tail_log, decision: deny}\n  - {hots: web1, decision: allow}\n")
	changed, err := pol.Refresh()
	if !changed || !errors.Is(err, broker.ErrPolicy) || !strings.Contains(err.Error(), `unknown field "hots"`) {
		t.Fatalf("Refresh of a broken file: %v, %v; want changed, ErrPolicy naming the field", changed, err)
	}
	if d := decide(); d != broker.Deny || len(pol.Rules()) != 2 {
		t.Errorf("a broken edit: %q with %d rules, want the last good rules (deny, 2)", d, len(pol.Rules()))
	}
	if changed, again := pol.Refresh(); changed || !errors.Is(again, broker.ErrPolicy) || !errors.Is(pol.Err(), broker.ErrPolicy) {
		t.Errorf("still broken: Refresh %v, %v; Err %v", changed, again, pol.Err())
	}

	write("rules:\n  - {host: web1, tool: tail_log, decision: allow}\n")
	if changed, err := pol.Refresh(); !changed || err != nil || pol.Err() != nil {
		t.Fatalf("Refresh after the fix: %v, %v, Err %v", changed, err, pol.Err())
	}
	if d := decide(); d != broker.Once {
		t.Errorf("after the fix: %q, want once", d)
	}

	os.Remove(file)
	if changed, err := pol.Refresh(); !changed || err != nil {
		t.Fatalf("Refresh of a removed file: %v, %v", changed, err)
	}
	if d := decide(); d != "" {
		t.Errorf("a removed file: %q, want a person asked", d)
	}
}

// TestOpenPolicyBroken: a policy that is broken when opened asks about
// everything, says why, and applies once fixed.
func TestOpenPolicyBroken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "broker-policy.yaml")
	os.WriteFile(file, []byte("rules:\n  - {tool: x, decision: maybe}\n"), 0o600)
	pol, err := OpenPolicy(file)
	if pol == nil || !errors.Is(err, broker.ErrPolicy) || !errors.Is(pol.Err(), broker.ErrPolicy) {
		t.Fatalf("OpenPolicy of a broken file: %v, %v", pol, err)
	}
	if _, _, ok := pol.Match(&broker.Request{Host: "h", Tool: "x"}); ok {
		t.Error("a broken policy matched")
	}
	if _, err := LoadPolicy(file); !errors.Is(err, broker.ErrPolicy) {
		t.Errorf("LoadPolicy of a broken file: %v", err)
	}
	os.WriteFile(file, []byte("rules:\n  - {tool: x, decision: deny}\n"), 0o600)
	if changed, err := pol.Refresh(); !changed || err != nil {
		t.Fatalf("after the fix: %v, %v", changed, err)
	}
	if d, _, ok := pol.Match(&broker.Request{Host: "h", Tool: "x"}); !ok || d != broker.Deny {
		t.Errorf("after the fix: %q, %v", d, ok)
	}
}

// TestPolicyConcurrent runs matches while answers are saved.
func TestPolicyConcurrent(t *testing.T) {
	p, _ := LoadPolicy(filepath.Join(t.TempDir(), "p.yaml"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := &broker.Request{Host: "h", Tool: "t" + string(rune('a'+i))}
			if err := p.AddAlways(r); err != nil {
				t.Error(err)
			}
			p.Match(r)
		})
	}
	wg.Wait()
	if n := len(p.Rules()); n != 8 {
		t.Errorf("%d rules after 8 concurrent answers, want 8", n)
	}
}

func FuzzParsePolicy(f *testing.F) {
	example, _ := os.ReadFile("testdata/policy/example.yaml")
	f.Add(string(example), "web1", "system_logs", true)
	f.Add("rules:\n  - {host: 'w*', tool: x, decision: allow}\n", "web1", "x", true)
	f.Fuzz(func(t *testing.T, src, host, tool string, sudo bool) {
		p, err := ParsePolicy("fuzz.yaml", []byte(src))
		if err != nil {
			if !errors.Is(err, broker.ErrPolicy) {
				t.Fatalf("%v is not ErrPolicy", err)
			}
			return
		}
		d, r, ok := p.Match(&broker.Request{Host: host, Tool: tool, Sudo: sudo})
		if ok && sudo && d != broker.Deny && !r.literal() {
			t.Fatalf("rule at line %d (host %q, tool %q) allowed sudo", r.Line, r.Host, r.Tool)
		}
	})
}
