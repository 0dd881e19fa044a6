package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"9fans.net/go/plan9/client"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/internal/nstest"
)

// TestModelNames: a model name is checked wherever one enters the
// namespace (agent/new's model=, ctl model, cfg's model=, generate's
// "model"), from the admin and from an agent's own tool alike, and a
// name that is a path out, too long or of other characters is refused
// with an error naming the field and what is allowed. The backend lists
// no models, so that nothing else stands in the way; real models' names
// are taken.
func TestModelNames(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, admin := modelDaemon(t, &steps{})
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(admin, "session/s/agent/new", "name=a"); err != nil {
		t.Fatal(err)
	}
	self := attachAgent(t, d, strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/a/id")))

	long := strings.Repeat("x", 5000)
	bad := []string{"../../etc/passwd", "qwen/../../../etc/shadow", "..", "/etc/passwd", long, "qwen 7b", "m;reboot", "m\x1b[2J", "m$HOME", "ünïcode"}
	for i, model := range bad {
		shown := model
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		quoted := "'" + strings.ReplaceAll(model, "'", `'\''`) + "'"
		genReq, _ := json.Marshal(map[string]string{"prompt": "hi", "model": model})
		for _, c := range []struct {
			who      string
			fs       *client.Fsys
			op, file string
			req      string
		}{
			{"the admin", admin, "rdwr", "session/s/agent/new", fmt.Sprintf("name=bad%d model=%s", i, quoted)},
			{"the admin", admin, "rdwr", "session/s/agent/a/ctl", "model " + model},
			{"the agent's tool", self, "rdwr", "session/s/agent/a/ctl", "model " + model},
			{"the agent's tool", self, "write", "session/s/agent/a/cfg", "model=" + quoted},
			{"the admin", admin, "rdwr", "generate", string(genReq)},
		} {
			var err error
			if c.op == "rdwr" {
				_, err = nstest.RdWr(c.fs, c.file, c.req)
			} else {
				err = nstest.WriteFile(c.fs, c.file, c.req)
			}
			if err == nil || !strings.Contains(err.Error(), "invalid model name") || !strings.Contains(err.Error(), "letters, digits and . _ : / - @ +") {
				t.Errorf("%s: %s model %q: %v, want it refused naming the field and what it allows", c.who, c.file, shown, err)
			} else if len(err.Error()) > 400 {
				t.Errorf("%s: %s model %q: the error repeats the whole name: %d bytes", c.who, c.file, shown, len(err.Error()))
			}
		}
	}
	if got := nstest.ReadFile(t, admin, "session/s/agent/idx"); strings.Count(got, "\n") != 1 {
		t.Errorf("agents were made with a bad model: %q", got)
	}
	if got, _ := nstest.RdWr(admin, "session/s/agent/a/ctl", "model"); got != "(the backend's default)\n" {
		t.Errorf("the agent's model after the refusals: %q", got)
	}

	// Real models' names.
	for i, model := range []string{"qwen2.5:7b", "openai/gpt-4o", "meta-llama/Llama-3.1-8B-Instruct", "hf.co/unsloth/Qwen3-GGUF:Q4_K_M", "claude-3-5-sonnet@20240620", "gpt-4o+tools"} {
		if _, err := nstest.RdWr(admin, "session/s/agent/new", fmt.Sprintf("name=ok%d model=%s", i, model)); err != nil {
			t.Errorf("agent/new model=%s: %v", model, err)
		}
		if got, err := nstest.RdWr(self, "session/s/agent/a/ctl", "model "+model); err != nil || got != model+"\n" {
			t.Errorf("the agent's tool: ctl model %s: %q %v", model, got, err)
		}
		if err := nstest.WriteFile(admin, "session/s/agent/a/cfg", "model="+model); err != nil {
			t.Errorf("cfg model=%s: %v", model, err)
		}
		genReq, _ := json.Marshal(map[string]string{"prompt": "hi", "model": model})
		if _, err := nstest.RdWr(admin, "generate", string(genReq)); err != nil {
			t.Errorf("generate with model %s: %v", model, err)
		}
	}
}

// TestRestoredModelChecked: a session file written before model names were
// checked may hold one that is a path; the agent comes back with the
// backend's default instead.
func TestRestoredModelChecked(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	state := t.TempDir()
	start := func() (*Daemon, *client.Fsys) {
		d, err := Start(Config{StateDir: state, Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Backends: func(string) (backend.Backend, error) { return &steps{}, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return d, nstest.Attach(t, d.Socket, "")
	}
	d, admin := start()
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(admin, "session/s/agent/new", "name=a model=m"); err != nil {
		t.Fatal(err)
	}
	sid := strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/id"))
	aid := strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/a/id"))
	// As an older olliesrv would have recorded it.
	if err := d.ns.logs.record(sid, agent.AgentModelSet{Agent: aid, Model: "../../etc/passwd"}); err != nil {
		t.Fatal(err)
	}
	d.Shutdown(context.Background())

	_, admin = start()
	if got, err := nstest.RdWr(admin, "session/s/agent/a/ctl", "model"); err != nil || got != "(the backend's default)\n" {
		t.Errorf("the restored agent's model: %q %v, want the backend's default", got, err)
	}
}
