package remote

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/lab"
	"ollie/internal/sshlab"
)

// Issue 31: the first hour as a test. docs/tour.md is the walk a new user
// takes; TestTour runs its commands, in order, on two real sshd hosts
// named web1 and web2, and checks that each shows what the page says it
// shows, so the page and ollie cannot drift apart.
//
// The page's format: in each ```console block, a line "$ CMD" is a
// command (run by sh, from a desktop with a home of its own), and the
// lines after it, up to the next "$ ", are what it prints: each must be
// a whole line of its output, in order (lines between are let be), "…"
// standing for any text within a line (shows). A line "# …" in a block is
// a comment for the reader.
//
// What the test adds, and the page says in words: ollie-remote and ssh
// get the lab's ssh configuration (-F), ollie-remote the binaries this
// build made (-bin, -data), and the model the page configures is the
// test's scripted one (its URL replaced), whose answers the page shows.

// tourStep is one command of the page and what it shows.
type tourStep struct {
	line int // of the command, in the page
	cmd  string
	want []string
}

// tourFile is a file the page has the reader write: a block whose info
// string is "LANG PATH" (PATH under ~).
type tourFile struct {
	path, text string
}

// readTour reads docs/tour.md's console blocks, and the files it has the
// reader write before them.
func readTour(t *testing.T, path string) ([]tourStep, []tourFile) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []tourStep
	var files []tourFile
	in, file := false, (*tourFile)(nil)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case file != nil && strings.HasPrefix(l, "```"):
			files = append(files, *file)
			file = nil
		case file != nil:
			file.text += l + "\n"
		case strings.HasPrefix(l, "```console"):
			in = true
		case !in && strings.HasPrefix(l, "```") && len(strings.Fields(l)) == 2 && strings.HasPrefix(strings.Fields(l)[1], "~/"):
			if len(steps) > 0 {
				t.Fatalf("%s:%d: a file to write after the first command: the tour writes its files first", path, n)
			}
			file = &tourFile{path: strings.TrimPrefix(strings.Fields(l)[1], "~/")}
		case in && strings.HasPrefix(l, "```"):
			in = false
		case !in, strings.HasPrefix(l, "# "):
		case strings.HasPrefix(l, "$ "):
			steps = append(steps, tourStep{line: n, cmd: strings.TrimPrefix(l, "$ ")})
		case len(steps) > 0 && strings.TrimSpace(l) != "":
			s := &steps[len(steps)-1]
			s.want = append(s.want, l)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("%s holds no command", path)
	}
	return steps, files
}

// shows reports whether out holds the wanted lines in order, each the
// whole of a line of out, "…" matching any text and any run of spaces
// matching any other (tables align their columns by the widest cell).
func shows(out string, want []string) (missing string) {
	lines := strings.Split(out, "\n")
	i := 0
	for _, w := range want {
		parts := strings.Split(strings.Join(strings.Fields(w), " "), "…")
		for j, p := range parts {
			parts[j] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		for ; i < len(lines) && !re.MatchString(strings.Join(strings.Fields(lines[i]), " ")); i++ {
		}
		if i == len(lines) {
			return w
		}
		i++
	}
	return ""
}

// tourModel answers as the page shows: a chat about the load runs uptime,
// a fleet goal about disks runs df; each answer quotes what its tool said.
func tourModel(req *fakellm.ChatRequest) fakellm.Response {
	goal, tool := "", ""
	for _, m := range req.Messages {
		switch m.Role {
		case "user":
			goal, tool = m.Text(), ""
		case "tool":
			tool = m.Text()
		}
	}
	first := strings.TrimSpace(strings.SplitN(tool, "\n", 2)[0])
	switch {
	case strings.Contains(goal, "disk") && tool == "":
		return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"command": "df -h /"}`}}}
	case strings.Contains(goal, "disk"):
		lines := strings.Split(strings.TrimSpace(tool), "\n")
		return fakellm.Response{Text: []string{"The root file system: ", strings.Join(strings.Fields(lines[len(lines)-1]), " ")}}
	case strings.Contains(goal, "load") && tool == "":
		return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"command": "uptime"}`}}}
	case strings.Contains(goal, "load"):
		return fakellm.Response{Text: []string{"uptime says: ", first}}
	}
	return fakellm.Response{Text: []string{"(the tour's model has no answer for this)"}}
}

func TestTour(t *testing.T) {
	lab.Root(t, "the tour runs sshd hosts and their users")
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	steps, files := readTour(t, "../../docs/tour.md")
	l := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "ortour"})
	r := newRemote(t, l)
	llm := fakellm.Start(t)
	llm.Respond(tourModel)

	// The desktop: a home of its own, the lab's hosts as web1 and web2.
	home := t.TempDir()
	cfg, err := os.ReadFile(l.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	sshConfig := filepath.Join(home, "ssh_config")
	named := strings.NewReplacer("Host "+l.Hosts[0].Name+"\n", "Host web1\n", "Host "+l.Hosts[1].Name+"\n", "Host web2\n").Replace(string(cfg))
	if err := os.WriteFile(sshConfig, []byte(named), 0644); err != nil {
		t.Fatal(err)
	}
	// The page's model, served by the test's script.
	urlRE := regexp.MustCompile(`"url": *"[^"]*"`)
	for _, f := range files {
		p := filepath.Join(home, f.path)
		os.MkdirAll(filepath.Dir(p), 0700)
		if err := os.WriteFile(p, []byte(urlRE.ReplaceAllString(f.text, `"url": "`+llm.URL+`/v1"`)), 0600); err != nil {
			t.Fatal(err)
		}
	}
	// The real ssh, found before the wrapper named ssh is first on PATH
	// (which would otherwise run itself forever).
	realSSH, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(home, "bin")
	os.MkdirAll(bin, 0755)
	for name, script := range map[string]string{
		"ollie-remote": fmt.Sprintf("exec %s -F %s -bin %s -data %s \"$@\"\n", remoteBin, sshConfig, binDir, dataDir),
		"ssh":          fmt.Sprintf("exec %s -F %s \"$@\"\n", realSSH, sshConfig),
		"ollie":        fmt.Sprintf("exec %s ollie \"$@\"\n", filepath.Join(binDir, "olliesrv")),
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+script), 0755); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"OLLIE_REMOTE_DIR="+r.dir, "SSH_AUTH_SOCK=", "NO_COLOR=1",
		"PATH="+bin+":"+os.Getenv("PATH"))

	for _, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", s.cmd)
		cmd.Env, cmd.Dir = env, home
		cmd.WaitDelay = 5 * time.Second // a child that keeps the output open
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("docs/tour.md:%d: $ %s (%v)\n%s", s.line, s.cmd, time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Errorf("docs/tour.md:%d: %s: %v", s.line, s.cmd, err)
		}
		if w := shows(string(out), s.want); w != "" {
			t.Errorf("docs/tour.md:%d: %s does not show %q (in order); it showed:\n%s", s.line, s.cmd, w, out)
		}
	}
}

// The tour's matcher: whole lines, in order, "…" for any text, spaces
// loose; a line missing, out of order or only part of a line is missing.
func TestTourShows(t *testing.T) {
	out := "web1: connecting\nHOST  OS/ARCH      BUILD\nweb1  linux/amd64  857718fd2b1e  6.8 MiB  ok\nweb2  linux/amd64  857718fd2b1e  FAILED\n"
	for _, c := range []struct {
		want    []string
		missing string
	}{
		{[]string{"HOST OS/ARCH BUILD", "web1 linux/amd64 … ok"}, ""},
		{[]string{"web1: …", "web2  …  FAILED"}, ""},
		{[]string{"web1 linux/amd64 … ok", "HOST OS/ARCH BUILD"}, "HOST OS/ARCH BUILD"},
		{[]string{"web2 linux/amd64 … ok"}, "web2 linux/amd64 … ok"},
		{[]string{"linux/amd64"}, "linux/amd64"},
	} {
		if got := shows(out, c.want); got != c.missing {
			t.Errorf("shows(%q) missing %q, want %q", c.want, got, c.missing)
		}
	}
}
