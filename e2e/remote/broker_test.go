package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/lab"
	"ollie/internal/sshlab"
	"ollie/ns/client"
)

// copyData copies the deployed data directory and adds the tools a test
// needs.
func copyData(t *testing.T, extra map[string]string) string {
	dir := filepath.Join(t.TempDir(), "data")
	err := filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dataDir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		return os.WriteFile(filepath.Join(dir, rel), b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range extra {
		mode := os.FileMode(0644)
		if !strings.HasSuffix(name, ".meta") {
			mode = 0755
		}
		os.WriteFile(filepath.Join(dir, "tools", name), []byte(content), mode)
	}
	return dir
}

// privateDir is a root-only directory outside /tmp and the lab users'
// homes, where the desktop's askpass keeps the password the test types:
// the places searched for the password afterwards are the host's.
func privateDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/run", "ollie-desk-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0700)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// askpass writes an askpass program for the desktop: it approves (or
// not), types the password, and logs each prompt.
func askpass(t *testing.T, dir, password string, approve bool) (program, log string) {
	log = filepath.Join(dir, "askpass.log")
	status := 0
	if !approve {
		status = 1
	}
	script := fmt.Sprintf(`#!/bin/sh
printf '%%s\n---\n' "$1" >> %s
if [ "$SSH_ASKPASS_PROMPT" = confirm ]; then exit %d; fi
printf '%%s\n' '%s'
`, log, status, password)
	program = filepath.Join(dir, "askpass")
	os.WriteFile(program, []byte(script), 0700)
	return program, log
}

func TestRemoteSudoApprovedOnDesktop(t *testing.T) {
	pwb := make([]byte, 12)
	rand.Read(pwb)
	password := "Pw-" + hex.EncodeToString(pwb)
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "orsudo", Password: password, Sudoers: true})
	h := lab.Host(0)
	r := newRemote(t, lab)
	data := copyData(t, map[string]string{
		"root_id.meta": `{"description": "Print the user id the tool runs as.", "sudo": true, "readOnly": true}`,
		"root_id":      "#!/bin/sh\nid -u\n",
	})
	out, err := exec.Command(remoteBin, "-F", lab.ConfigFile, "-bin", r.bin, "-data", data, "deploy", "h11").CombinedOutput()
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}

	// The host's agent uses a scripted model on the desktop: it calls
	// root_id, then answers.
	llm := fakellm.Start(t)
	cfgDir := filepath.Join(h.Home, ".config", "ollie")
	os.MkdirAll(cfgDir, 0700)
	os.WriteFile(filepath.Join(cfgDir, "backends.json"),
		[]byte(`{"backends": {"fake": {"type": "openai", "url": "`+llm.URL+`/v1", "model": "fake-model"}}}`), 0600)
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), filepath.Join(h.Home, ".config")).Run()
	llm.Push(fakellm.ToolCall("root_id", `{}`), fakellm.Text("root_id said so"))

	desk := privateDir(t)
	program, log := askpass(t, desk, password, true)
	up := r.cmd("up", "h11")
	up.Env = append(up.Env, "OLLIE_ASKPASS="+program)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	c, err := client.DialAs(filepath.Join(r.dir, "h11.ns"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The keeper registers the broker's socket with the host.
	if !await.Poll(ctx, func() bool {
		b, _ := c.ReadAll(ctx, "bypass/broker")
		return strings.Contains(string(b), "broker-")
	}) {
		t.Fatal("the host never learnt of the desktop broker")
	}
	if _, err := c.RdWr(ctx, "session/new", []byte("name=s")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RdWr(ctx, "session/s/agent/new", []byte("name=a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, "session/s/agent/a/prompt", []byte("who am I as root?")); err != nil {
		t.Fatal(err)
	}
	if !await.Poll(ctx, func() bool { return llm.Served() >= 2 }) {
		t.Fatalf("the agent did not come back to the model after the tool; chat:\n%s", readChat(c))
	}
	reqs := llm.ChatRequests()
	last := reqs[len(reqs)-1]
	toolOut := ""
	for _, m := range last.Messages {
		if m.Role == "tool" {
			toolOut = m.Text()
		}
	}
	if strings.TrimSpace(toolOut) != "0" {
		t.Errorf("root_id's output reached the model as %q, want 0; chat:\n%s", toolOut, readChat(c))
	}
	asked, _ := os.ReadFile(log)
	if !strings.Contains(string(asked), "h11 asks to run as root") || !strings.Contains(string(asked), "root_id") ||
		!strings.Contains(string(asked), "sudo password for root on h11") {
		t.Errorf("the desktop was asked:\n%s", asked)
	}
	// Who asks: the agent's session and the agent, by name and ID; and no
	// variant for a tool without.
	sid, _ := c.ReadAll(ctx, "session/s/id")
	aid, _ := c.ReadAll(ctx, "session/s/agent/a/id")
	who := fmt.Sprintf("    session:  \"s\" (\"%s\"), agent \"a\" (\"%s\")\n", strings.TrimSpace(string(sid)), strings.TrimSpace(string(aid)))
	if !strings.Contains(string(asked), who) || strings.Contains(string(asked), "variant") {
		t.Errorf("the desktop's prompt does not say %q (or names a variant):\n%s", who, asked)
	}
	c.Close()
	r.must("down", "-stop-daemon", "h11")

	// The password is nowhere on the host.
	searchFor(t, password, h.Home, "/tmp", "/var/log")
	searchProcsFor(t, password)
	sessions, _ := filepath.Glob(filepath.Join(h.Home, ".local/state/ollie/sessions/*"))
	if len(sessions) == 0 {
		t.Error("no session file to search")
	}
}

func readChat(c *client.Conn) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, _ := c.ReadAll(ctx, "session/s/agent/a/log")
	return string(b)
}

// searchFor and searchProcsFor are lab.SearchFiles and lab.SearchProcs
// under the names these tests use (their labs are variables named lab).
func searchFor(t *testing.T, secret string, roots ...string) {
	t.Helper()
	lab.SearchFiles(t, secret, roots...)
}

func searchProcsFor(t *testing.T, secret string) {
	t.Helper()
	lab.SearchProcs(t, secret)
}
