package host

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"9fans.net/go/plan9/client"

	"ollie/internal/nstest"
)

func TestKeyValues(t *testing.T) {
	keys := []string{"name", "cwd"}
	for _, tc := range []struct {
		in   string
		want []keyValue
		err  string
	}{
		{in: "name=a cwd='/my dir'", want: []keyValue{{"name", "a"}, {"cwd", "/my dir"}}},
		{in: "cwd=/ name=", want: []keyValue{{"cwd", "/"}, {"name", ""}}},
		{in: "", want: nil},
		{in: "name=a name=b", err: "name given twice"},
		{in: "name=a\nname=a", err: "name given twice"},
		{in: "cwd=/ 'cwd=/tmp'", err: "cwd given twice"},
		{in: "other=1 other=2", err: "other given twice"},
		{in: "name=a b", err: `"b" is not key=value (keys: name, cwd)`},
		{in: "=a", err: `"=a" is not key=value`},
		{in: "name='a", err: "quote is not closed"},
	} {
		got, err := keyValues(tc.in, keys)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v %v, want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestKeyGivenTwice: a request of key=value words that gives a key twice
// is refused, whichever file takes it, rather than one of the two being
// kept: which one was meant is not for olliesrv to guess. Nothing is made
// or changed.
func TestKeyGivenTwice(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, admin := modelDaemon(t, &twoStep{})
	work := t.TempDir()
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+work); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(admin, "session/s/agent/new", "name=a profile=orchestrator"); err != nil {
		t.Fatal(err)
	}
	self := attachAgent(t, d, strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/a/id")))
	policy := nstest.ReadFile(t, admin, "bypass/policy")
	for _, c := range []struct {
		who      string
		fs       *client.Fsys
		op, file string
		req      string
		key      string
	}{
		{"the admin", admin, "rdwr", "session/new", "name=x name=y", "name"},
		{"the admin", admin, "rdwr", "session/new", "name=x cwd=" + work + " cwd=/", "cwd"},
		{"the admin", admin, "rdwr", "session/new", "yolo=false name=x yolo=true", "yolo"},
		{"the agent's tool", self, "rdwr", "session/new", "name=x cwd=" + work + " cwd=/", "cwd"},
		{"the admin", admin, "rdwr", "session/s/agent/new", "name=x name=y", "name"},
		{"the admin", admin, "rdwr", "session/s/agent/new", "name=x profile=worker profile=orchestrator", "profile"},
		{"the admin", admin, "rdwr", "session/s/agent/new", "name=x model=m model=other-model prompt=hi", "model"},
		{"the admin", admin, "rdwr", "session/s/agent/new", "name=x backend=a 'backend=b'", "backend"},
		{"the agent's tool", self, "rdwr", "session/s/agent/new", "name=x cwd=" + work + " cwd=/", "cwd"},
		{"the admin", admin, "write", "session/s/agent/a/cfg", "model=m\nmodel=other-model", "model"},
		{"the agent's tool", self, "write", "session/s/agent/a/cfg", "model=other-model model=m", "model"},
		{"the admin", admin, "write", "bypass/policy", "nobroker=deny nobroker=pending", "nobroker"},
		{"the admin", admin, "write", "bypass/policy", "timeout=1s\ntimeout=1h", "timeout"},
	} {
		var err error
		if c.op == "rdwr" {
			_, err = nstest.RdWr(c.fs, c.file, c.req)
		} else {
			err = nstest.WriteFile(c.fs, c.file, c.req)
		}
		if want := c.key + " given twice"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %s %q: %v, want an error saying %q", c.who, c.file, c.req, err, want)
		}
	}
	if got := nstest.ReadFile(t, admin, "session/idx"); strings.Count(got, "\n") != 1 {
		t.Errorf("sessions were made: %q", got)
	}
	if got := nstest.ReadFile(t, admin, "session/s/agent/idx"); strings.Count(got, "\n") != 1 {
		t.Errorf("agents were made: %q", got)
	}
	if got, _ := nstest.RdWr(admin, "session/s/agent/a/ctl", "model"); got != "(the backend's default)\n" {
		t.Errorf("the agent's model was set: %q", got)
	}
	if got := nstest.ReadFile(t, admin, "bypass/policy"); got != policy {
		t.Errorf("bypass/policy changed from %q to %q", policy, got)
	}
}

// TestSessionResumeKey: session/new takes resume=auto or resume=manual
// (issue 30) and refuses anything else, saying what each means; the mode
// is in the session's file, for a restart to find.
func TestSessionResumeKey(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, admin := modelDaemon(t, &twoStep{})
	if _, err := nstest.RdWr(admin, "session/new", "name=x resume=maybe"); err == nil || !strings.Contains(err.Error(), "is not auto") || !strings.Contains(err.Error(), "manual (it waits for a person)") {
		t.Errorf("resume=maybe: %v, want refused saying what auto and manual do", err)
	}
	for _, c := range []struct{ name, req, meta string }{
		{"m", "name=m resume=manual", `"resume":"manual"`},
		{"a", "name=a resume=auto", ""},
		{"d", "name=d", ""},
	} {
		if _, err := nstest.RdWr(admin, "session/new", c.req); err != nil {
			t.Fatalf("%s: %v", c.req, err)
		}
		id := strings.TrimSpace(nstest.ReadFile(t, admin, "session/"+c.name+"/id"))
		b, err := os.ReadFile(filepath.Join(d.ns.logs.dir, id+".jsonl"))
		if err != nil {
			t.Fatalf("%s: %v", c.req, err)
		}
		header, _, _ := strings.Cut(string(b), "\n")
		if c.meta != "" && !strings.Contains(header, c.meta) || c.meta == "" && strings.Contains(header, `"resume"`) {
			t.Errorf("%s: the session file's header %s, want %q in it", c.req, header, c.meta)
		}
	}
}
