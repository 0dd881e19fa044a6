package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The credential gate zeroes every buffer of its own that held the sudo
// password: each password the grant handed it, right or wrong, once sudo
// has it, and sudoValidate's copy of it with its newline. These tests
// keep the slices (the grant's as the grant, the copy through
// testHookSudoLine) and look at them once the tool has run: all zero.
// TestSudoZeroes runs everywhere, against a sudo of the test's own that
// asks as sudo asks; TestSudoZeroesRealSudo is the same against the real
// sudo, as a real user, in the lab tier.

// zeroSpec is a run of the credential gate: the tool, its arguments, and
// the passwords a person types, in order.
type zeroSpec struct {
	Tool      string   `json:"tool"`
	Args      string   `json:"args"`
	Passwords []string `json:"passwords"`
}

// zeroOutcome is what the run gave, and which buffers are still not zero
// once it ended: no password, only which ones.
type zeroOutcome struct {
	Output   string   `json:"output"`
	Err      string   `json:"err"`
	Problems []string `json:"problems"` // one per password asked
	Given    []bool   `json:"given"`    // each password handed over: zeroed?
	Lines    []bool   `json:"lines"`    // each line sudoValidate wrote: zeroed?
}

// keepingGrant is a person who types passwords in order; it keeps each
// slice it hands over, to look at later.
type keepingGrant struct {
	pws      []string
	given    [][]byte
	problems []string
}

func (g *keepingGrant) Password(ctx context.Context, attempt int, problem string) ([]byte, error) {
	g.problems = append(g.problems, problem)
	if len(g.pws) == 0 {
		return nil, fmt.Errorf("denied: no more passwords")
	}
	pw := []byte(g.pws[0])
	g.pws = g.pws[1:]
	g.given = append(g.given, pw)
	return pw, nil
}

func (g *keepingGrant) Close(string) error { return nil }

func allZero(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }

// zeroRun runs the tool with sudo as spec says, through sudoCommand as
// the runner does, and reports what was left in the buffers.
func zeroRun(spec zeroSpec) zeroOutcome {
	var lines [][]byte
	testHookSudoLine = func(line []byte) { lines = append(lines, line) }
	defer func() { testHookSudoLine = nil }()
	g := &keepingGrant{pws: spec.Passwords}
	r := &Runner{Cwd: "/"}
	var out zeroOutcome
	cmd, err := r.sudoCommand(context.Background(), &Tool{Name: "zero_root", Path: spec.Tool}, json.RawMessage(spec.Args), g)
	if err == nil {
		var b strings.Builder
		cmd.Stdout, cmd.Stderr = &b, &b
		p := &callProc{cmd: cmd}
		if err = p.start(); err == nil {
			err = p.wait()
		}
		out.Output = b.String()
	}
	if err != nil {
		out.Err = err.Error()
	}
	out.Problems = g.problems
	for _, pw := range g.given {
		out.Given = append(out.Given, allZero(pw))
	}
	for _, line := range lines {
		out.Lines = append(out.Lines, allZero(line))
	}
	return out
}

// checkZeroed checks one run: what it did, and every buffer zeroed.
func checkZeroed(t *testing.T, o zeroOutcome, args string, asked int, ran bool) {
	t.Helper()
	if ran && (o.Err != "" || !strings.HasSuffix(o.Output, args)) {
		t.Errorf("outcome %+v: want the tool run with its arguments", o)
	}
	if !ran && (!strings.Contains(o.Err, "wrong 3 times") || o.Output != "") {
		t.Errorf("outcome %+v: want the tool not run, the password wrong 3 times", o)
	}
	if len(o.Problems) != asked || len(o.Given) != asked {
		t.Errorf("%d passwords asked, %d handed over; want %d", len(o.Problems), len(o.Given), asked)
	}
	// sudo -v checks each password once.
	if len(o.Lines) != asked {
		t.Errorf("sudoValidate wrote %d password lines, want %d", len(o.Lines), asked)
	}
	for i, zeroed := range o.Given {
		if !zeroed {
			what := "wrong"
			if ran && i == len(o.Given)-1 {
				what = "right"
			}
			t.Errorf("password %d (the %s one) is still in the buffer the grant handed over", i+1, what)
		}
	}
	for i, zeroed := range o.Lines {
		if !zeroed {
			t.Errorf("sudoValidate's line with password %d is still in memory", i+1)
		}
	}
}

// fakeSudo is a sudo that asks for password right as sudo -S does: sudo
// -n refuses, saying a password is required; sudo -S reads one line and
// takes it or says so, as sudo's C messages say; then sudo -v ends and
// sudo -- CMD runs CMD on the rest of its input.
const fakeSudo = `#!/bin/sh
case $1 in
-n) echo "sudo: a password is required" >&2; exit 1 ;;
-S) ;;
*) echo "fakesudo: unexpected $*" >&2; exit 2 ;;
esac
validate=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	[ "$1" = -v ] && validate=1
	shift
done
IFS= read -r line || line=
if [ "$line" != '%s' ]; then
	echo "Sorry, try again." >&2
	echo "sudo: 1 incorrect password attempt" >&2
	exit 1
fi
[ -n "$validate" ] && exit 0
shift
exec "$@"
`

// TestSudoZeroes: a wrong password and then the right one, the right one
// at once, and three wrong ones (the fourth is never asked for), against
// a sudo that asks as sudo does.
func TestSudoZeroes(t *testing.T) {
	dir := t.TempDir()
	right, wrong := "pw-right-"+randomHex(t), "pw-wrong-"+randomHex(t)
	sudo := filepath.Join(dir, "sudo")
	if err := os.WriteFile(sudo, []byte(fmt.Sprintf(fakeSudo, right)), 0700); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(dir, "zero_root")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\ncat\n"), 0700); err != nil {
		t.Fatal(err)
	}
	old := sudoPath
	sudoPath = sudo
	t.Cleanup(func() { sudoPath = old })
	args := `{"n": 1}`

	t.Run("wrong then right", func(t *testing.T) {
		o := zeroRun(zeroSpec{Tool: tool, Args: args, Passwords: []string{wrong, right}})
		checkZeroed(t, o, args, 2, true)
		if fmt.Sprint(o.Problems) != "[ wrong password]" {
			t.Errorf("asked %q", o.Problems)
		}
	})
	t.Run("right", func(t *testing.T) {
		checkZeroed(t, zeroRun(zeroSpec{Tool: tool, Args: args, Passwords: []string{right}}), args, 1, true)
	})
	t.Run("wrong three times", func(t *testing.T) {
		o := zeroRun(zeroSpec{Tool: tool, Args: args, Passwords: []string{wrong + "1", wrong + "2", wrong + "3", right}})
		checkZeroed(t, o, args, 3, false)
	})
}

const zeroHelperEnv = "OLLIE_TEST_SUDO_ZERO_HELPER"

// The test binary, started with zeroHelperEnv as a real user, runs the
// credential gate against the real sudo (zeroRun) and prints its
// outcome. It does so before TestMain: nothing else of the test binary
// is needed.
func init() {
	if os.Getenv(zeroHelperEnv) == "" {
		return
	}
	var spec zeroSpec
	json.NewDecoder(os.Stdin).Decode(&spec)
	json.NewEncoder(os.Stdout).Encode(zeroRun(spec))
	os.Exit(0)
}

// TestSudoZeroesRealSudo is TestSudoZeroes against the real sudo, as a
// user with a password whom sudoers lets run anything with it: the lab
// tier's (sudoUser skips it elsewhere).
func TestSudoZeroesRealSudo(t *testing.T) {
	// Fixed, not random: the user is the machine's, and another run of
	// this test at the same time sets its password too.
	right, wrong := "pw-right-olsudo6", "pw-wrong-olsudo6"
	uid, gid := sudoUser(t, "olsudo6", right, "olsudo6 ALL=(ALL) ALL")
	dir, err := os.MkdirTemp("", "ollie-sudo-zero-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0755)
	exe := filepath.Join(dir, "toolsrv.test")
	copyFile(t, exe)
	tool := filepath.Join(dir, "zero_root")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\nid -u\ncat\n"), 0755); err != nil {
		t.Fatal(err)
	}
	args := `{"n": 1}`
	run := func(t *testing.T, pws []string) zeroOutcome {
		t.Helper()
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = []string{zeroHelperEnv + "=1", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/"}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		b, _ := json.Marshal(zeroSpec{Tool: tool, Args: args, Passwords: pws})
		cmd.Stdin = strings.NewReader(string(b))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		var o zeroOutcome
		if err := json.Unmarshal(out, &o); err != nil {
			t.Fatalf("helper said %q: %v", out, err)
		}
		return o
	}

	// A wrong password and the right one: each buffer there is. (Three
	// wrong ones take sudo's delay three times; TestSudoGate has them.)
	o := run(t, []string{wrong, right})
	checkZeroed(t, o, args, 2, true)
	if !strings.HasPrefix(o.Output, "0\n") {
		t.Errorf("the tool did not run as root: %q", o.Output)
	}
}
