package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/await"
)

func promptEnv(t *testing.T) PromptEnv {
	return PromptEnv{Data: t.TempDir(), Cwd: t.TempDir(), Session: "s-1", Agent: "a-1"}
}

func resolveIn(t *testing.T, env PromptEnv, commands ...string) (string, error) {
	t.Helper()
	return ResolvePrompt(context.Background(), &Profile{Name: "t", File: "/x/t.json", Prompt: commands}, env)
}

func TestPromptOrder(t *testing.T) {
	env := promptEnv(t)
	putFile(t, filepath.Join(env.Data, "agents", "prompts", "frag.md"), "# Fragment\nno newline at the end")
	got, err := resolveIn(t, env,
		"echo one",
		"printf two",
		"true", // writes nothing: adds nothing
		`cat "$OLLIE/agents/prompts/frag.md"`,
		"printf 'three\\n\\n'",
	)
	if want := "one\ntwo\n# Fragment\nno newline at the end\nthree\n\n"; got != want || err != nil {
		t.Errorf("got %q, %v\nwant %q", got, err, want)
	}
	if got, err := resolveIn(t, env); got != "" || err != nil {
		t.Errorf("no commands: %q, %v; want no prompt and no error", got, err)
	}
}

func TestPromptEnv(t *testing.T) {
	env := promptEnv(t)
	env.Env = []string{"SESSION_VAR=from the session", "OLLIE=overridden?"}
	t.Setenv("DAEMON_VAR", "from olliesrv")
	got, err := resolveIn(t, env, `printf '%s\n' "$OLLIE" "$OLLIE_CWD" "$PWD" "$(pwd -P)" "$OLLIE_SESSION" "$OLLIE_AGENT" "$OLLIE_PROFILE" "$SESSION_VAR" "$DAEMON_VAR"`)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(env.Cwd)
	want := strings.Join([]string{env.Data, env.Cwd, env.Cwd, real, "s-1", "a-1", "t", "from the session", "from olliesrv"}, "\n") + "\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// Without Data, $OLLIE is DataDir().
	t.Setenv("OLLIE_DATA", "/opt/ollie/data")
	env.Data, env.Env = "", nil
	if got, _ := resolveIn(t, env, `echo "$OLLIE"`); got != "/opt/ollie/data\n" {
		t.Errorf("$OLLIE = %q, want DataDir()", got)
	}
}

func TestPromptFailure(t *testing.T) {
	env := promptEnv(t)
	_, err := resolveIn(t, env, "echo fine", `echo partial; echo "first line" >&2; echo "second line" >&2; exit 3`, "echo never")
	var pe *PromptError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *PromptError", err)
	}
	if pe.Profile != "t" || pe.Index != 1 || pe.ExitCode != 3 || pe.Stderr != "first line\nsecond line\n" {
		t.Errorf("%+v", pe)
	}
	want := "agent: profile \"t\" (/x/t.json): prompt[1] `echo partial; echo \"first line\" >&2; echo \"second line\" >&2; exit 3`: exit status 3: first line; second line"
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}

	// A missing fragment, the usual mistake.
	_, err = resolveIn(t, env, `cat "$OLLIE/agents/prompts/nope.md"`)
	if err == nil || !strings.Contains(err.Error(), "prompt[0]") || !strings.Contains(err.Error(), "nope.md: No such file or directory") {
		t.Errorf("missing fragment: %v", err)
	}

	for _, tc := range []struct {
		commands []string
		msg      string
	}{
		{[]string{"true", "printf '  \\n'"}, "the 2 prompt commands wrote nothing: the agent would have no instructions"},
		{[]string{`printf '\377\376'`}, "prompt[0] `printf '\\377\\376'`: its output is not UTF-8 text"},
		{[]string{"echo a", "yes"}, "prompt[1] `yes`: the prompt would be longer than 256 KiB"},
		{[]string{"head -c 200000 /dev/zero | tr '\\0' a", "head -c 100000 /dev/zero | tr '\\0' b"}, "prompt[1]"},
		{[]string{"nosuchcommand-ollie"}, "`nosuchcommand-ollie`: exit status 127: "},
	} {
		_, err := resolveIn(t, env, tc.commands...)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: err = %v, want %q", tc.commands, err, tc.msg)
		}
	}

	env.Cwd = "relative/dir"
	if _, err := resolveIn(t, env, "echo x"); err == nil || !strings.Contains(err.Error(), `the working directory "relative/dir" is not an absolute path`) {
		t.Errorf("relative cwd: %v", err)
	}
	env.Cwd = "/nonexistent/ollie-test"
	if _, err := resolveIn(t, env, "echo x"); err == nil || !strings.Contains(err.Error(), "/nonexistent/ollie-test") {
		t.Errorf("missing cwd: %v", err)
	}
}

// alive reports whether process pid exists and is not a zombie.
func procAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(stat)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestPromptTimeout(t *testing.T) {
	env := promptEnv(t)
	env.Timeout = 200 * time.Millisecond
	pidFile := filepath.Join(env.Cwd, "pid")
	// The sleep in the background is in the command's process group: it
	// dies with the shell. The error says the timeout ended the command.
	_, err := resolveIn(t, env, "echo ok", `sleep 30 & echo $! > pid; wait`)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "prompt[1] `sleep 30 & echo $! > pid; wait`: timed out after 200ms") {
		t.Errorf("err = %v", err)
	}
	pid := readPid(t, pidFile)
	gone, cancelGone := context.WithTimeout(context.Background(), time.Second)
	defer cancelGone()
	if !await.Poll(gone, func() bool { return !procAlive(pid) }) {
		t.Errorf("the command's background process %d outlived it", pid)
	}

	// The caller's context ends a slow command too, with its cause.
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(ErrClosed) })
	env.Timeout = 0
	_, err = ResolvePrompt(ctx, &Profile{Name: "t", Prompt: []string{"sleep 30"}}, env)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("cancelled: err = %v", err)
	}
}

// TestPromptDeployed resolves every deployed profile outside and inside a
// git repository with project notes.
func TestPromptDeployed(t *testing.T) {
	data, config := deployedData(t)
	putFile(t, filepath.Join(config, "ollie", "AGENTS.md"), "Answer in French.\n")
	plain := t.TempDir()
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "trunk"}, {"config", "user.email", "t@example.com"}, {"config", "user.name", "t"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v\n%s", args, err, out)
		}
	}
	putFile(t, filepath.Join(repo, "AGENTS.md"), "Run make check before finishing.\n")
	putFile(t, filepath.Join(repo, "sub", "x.go"), "package x\n")

	// Resolved together, as agents are created together.
	var wg sync.WaitGroup
	for _, name := range ProfileNames() {
		p, err := LoadProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		role, err := os.ReadFile(filepath.Join(data, "agents", "prompts", name+".md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, cwd := range []string{plain, filepath.Join(repo, "sub")} {
			wg.Go(func() {
				got, err := ResolvePrompt(context.Background(), p, PromptEnv{Cwd: cwd, Session: "s-1", Agent: "a-1"})
				if err != nil {
					t.Errorf("%s in %s: %v", name, cwd, err)
					return
				}
				want := []string{"# ollie agent", string(role), "Answer in French.", "## Environment",
					"- Working directory: " + cwd, "- ollie: session s-1, agent a-1, profile " + name}
				if cwd != plain {
					want = append(want, "## Project notes ("+filepath.Join(repo, "AGENTS.md")+")", "Run make check before finishing.",
						"- Git repository: "+repo+"\n- Branch: No commits yet on trunk\n", "2 changed or untracked paths", "?? AGENTS.md")
				}
				for _, w := range want {
					if !strings.Contains(got, w) {
						t.Errorf("%s in %s: the prompt lacks %q:\n%s", name, cwd, w, got)
					}
				}
				if cwd == plain && strings.Contains(got, "Git repository") {
					t.Errorf("%s: a git section outside a repository", name)
				}
			})
		}
	}
	wg.Wait()
}
