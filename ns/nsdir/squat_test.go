package nsdir_test

// The attack of issue #28 item 4, played with real users: another local
// user makes the victim's namespace directory first, world-writable, with
// a socket of its own in it. The victim's ollie must not say a byte to it,
// and the victim's olliesrv must refuse to serve there, each naming the
// directory and its owner.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/internal/lab"
)

// The lab's users: made once, kept (useradd is slow and other labs do
// the same).
const (
	victimUser   = "ollie-victim"
	squatterUser = "ollie-squat"
)

// squatEnv names the directory a re-executed test binary squats: the
// squatter, run as squatterUser.
const squatEnv = "NSDIR_TEST_SQUAT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(squatEnv); dir != "" {
		os.Exit(squat(dir, os.Getenv(squatEnv+"_LINK")))
	}
	os.Exit(m.Run())
}

// squat makes dir (mode 0777) with a socket "ollie" in it that any user
// may connect to, or, with link set, a directory of its own that link
// points to. It says "ready", then "conn" for each connection and "read
// N" for each read; when its stdin closes it says "total N" (the bytes
// it received) and exits.
func squat(dir, link string) int {
	fail := func(err error) int {
		fmt.Println("error:", err)
		return 1
	}
	syscall.Umask(0)
	if err := os.Mkdir(dir, 0777); err != nil {
		return fail(err)
	}
	if link != "" {
		if err := os.Symlink(dir, link); err != nil {
			return fail(err)
		}
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "ollie"))
	if err != nil {
		return fail(err)
	}
	os.Chmod(filepath.Join(dir, "ollie"), 0777)
	var (
		mu    sync.Mutex
		total int
		conns sync.WaitGroup
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	accept := func() bool {
		c, err := ln.Accept()
		if err != nil {
			return false
		}
		say("conn")
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer c.Close()
			buf := make([]byte, 8192)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					mu.Lock()
					total += n
					mu.Unlock()
					say("read %d", n)
				}
				if err != nil {
					return
				}
			}
		}()
		return true
	}
	done := make(chan struct{})
	go func() {
		for accept() {
		}
		close(done)
	}()
	say("ready")
	io.Copy(io.Discard, os.Stdin)
	// What is queued still counts: accept it, then let the readers end
	// (their peers, the victim's commands, have exited).
	ln.(*net.UnixListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
	<-done
	conns.Wait()
	say("total %d", total)
	return 0
}

// A squatter is the attacker's process, run as squatterUser.
type squatter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	lines []string
}

// startSquatter runs the test binary, copied where squatterUser can run
// it, as squatterUser squatting dir (through link, if set), and waits
// until it listens.
func startSquatter(t *testing.T, bin, dir, link string, uid, gid int) *squatter {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{squatEnv + "=" + dir, squatEnv + "_LINK=" + link, "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &squatter{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if !s.out.Scan() || s.out.Text() != "ready" {
		t.Fatalf("the squatter did not start: %q %v", s.out.Text(), s.out.Err())
	}
	return s
}

// stop ends the squatter and returns the bytes it received.
func (s *squatter) stop(t *testing.T) int {
	t.Helper()
	s.stdin.Close()
	for s.out.Scan() {
		line := s.out.Text()
		s.lines = append(s.lines, line)
		if n, ok := strings.CutPrefix(line, "total "); ok {
			total, _ := strconv.Atoi(n)
			return total
		}
	}
	t.Fatalf("the squatter ended without a total: %q", s.lines)
	return 0
}

// labUser makes name unless it exists.
func labUser(t *testing.T, name string) (uid, gid int) {
	t.Helper()
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "-M", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
			if _, err2 := user.Lookup(name); err2 != nil {
				t.Fatalf("useradd %s: %v: %s", name, err, out)
			}
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// squatLab is the lab's binaries, in a directory both users can read,
// and the victim's home.
type squatLab struct {
	bin       string // olliesrv, ollie (a link to it) and nsdir.test
	home      string // the victim's HOME
	victimUID int
	victimGID int
	squatUID  int
	squatGID  int
	victimDir string // the victim's default namespace directory
}

func newSquatLab(t *testing.T) *squatLab {
	t.Helper()
	lab.Root(t, "the squatting lab makes two users and runs processes as each, which")
	_, err := exec.LookPath("useradd")
	lab.Need(t, err == nil, "the squatting lab needs useradd")
	l := &squatLab{victimDir: "/tmp/ns." + victimUser + ".:0"}
	l.victimUID, l.victimGID = labUser(t, victimUser)
	l.squatUID, l.squatGID = labUser(t, squatterUser)

	base, err := os.MkdirTemp("", "ollie-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0755)
	l.bin = filepath.Join(base, "bin")
	l.home = filepath.Join(base, "home")
	os.Mkdir(l.bin, 0755)
	os.Mkdir(l.home, 0700)
	os.Chown(l.home, l.victimUID, l.victimGID)

	// The real binaries, as make builds them: olliesrv, and ollie a link
	// to it.
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("where is the module? %v", err)
	}
	build := exec.Command("go", "build", "-buildvcs=false", "-o", filepath.Join(l.bin, "olliesrv"), "./cmd/olliesrv")
	build.Dir = strings.TrimSpace(string(mod))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building olliesrv: %v\n%s", err, out)
	}
	if err := os.Symlink("olliesrv", filepath.Join(l.bin, "ollie")); err != nil {
		t.Fatal(err)
	}
	// The squatter is this test binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.bin, "nsdir.test"), b, 0755); err != nil {
		t.Fatal(err)
	}
	l.clear(t)
	t.Cleanup(func() { l.clear(t) })
	return l
}

// clear removes what a squatter left in /tmp.
func (l *squatLab) clear(t *testing.T) {
	for _, p := range []string{l.victimDir, l.victimDir + ".real"} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
}

// victim runs the victim's program (ollie or olliesrv) with args, as the
// victim in its own environment, bounded by 30 s, and returns its exit
// status and stderr.
func (l *squatLab) victim(t *testing.T, prog string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(l.bin, prog), args...)
	cmd.Dir = l.home
	cmd.Env = []string{
		"USER=" + victimUser, "LOGNAME=" + victimUser, "HOME=" + l.home, "DISPLAY=:0",
		"PATH=" + l.bin + ":/usr/bin:/bin", "XDG_STATE_HOME=" + filepath.Join(l.home, "state"),
		"XDG_CONFIG_HOME=" + filepath.Join(l.home, "config"),
		"OLLIE_HANDSHAKE_TIMEOUT=3s", "OLLIE_TIMEOUT=3s",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(l.victimUID), Gid: uint32(l.victimGID)}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not end within 30 s:\n%s%s", prog, strings.Join(args, " "), stdout.String(), stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", prog, err)
	}
	t.Logf("%s %s: exit %d\n%s%s", prog, strings.Join(args, " "), code, stdout.String(), stderr.String())
	return code, stderr.String()
}

// wantAll fails t unless text holds every one of want.
func wantAll(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not say %q:\n%s", what, w, text)
		}
	}
}

// The squatter makes the victim's /tmp/ns.USER.:0 first, mode 0777, and
// listens in it. ollie (and ollie -start) refuse before sending a byte,
// naming the directory and the squatter; olliesrv refuses to serve,
// naming the directory, its owner and its mode.
func TestSquattedNamespaceLab(t *testing.T) {
	l := newSquatLab(t)
	owner := fmt.Sprintf("%s (uid %d)", squatterUser, l.squatUID)

	t.Run("directory", func(t *testing.T) {
		s := startSquatter(t, filepath.Join(l.bin, "nsdir.test"), l.victimDir, "", l.squatUID, l.squatGID)
		for _, args := range [][]string{{"ls", "/"}, {"-start", "ls", "/"}} {
			code, stderr := l.victim(t, "ollie", args...)
			if code == 0 {
				t.Errorf("ollie %s succeeded in a squatted namespace", args)
			}
			wantAll(t, "ollie's error", stderr, l.victimDir, owner)
		}
		code, stderr := l.victim(t, "olliesrv")
		if code == 0 {
			t.Errorf("olliesrv served from a squatted namespace")
		}
		wantAll(t, "olliesrv's error", stderr, l.victimDir, owner, "0777", "NAMESPACE")
		if n := s.stop(t); n != 0 {
			t.Errorf("the squatter received %d bytes from the victim: %q", n, s.lines)
		}
	})

	// The victim names a socket of the squatter's itself: it is not in
	// the namespace directory, so what refuses is the peer's uid.
	t.Run("named socket", func(t *testing.T) {
		l.clear(t)
		sock := filepath.Join(l.victimDir+".real", "ollie")
		s := startSquatter(t, filepath.Join(l.bin, "nsdir.test"), filepath.Dir(sock), "", l.squatUID, l.squatGID)
		code, stderr := l.victim(t, "ollie", "-a", sock, "ls", "/")
		if code == 0 {
			t.Errorf("ollie -a spoke to another user's socket")
		}
		wantAll(t, "ollie's error", stderr, sock, "served by "+owner)
		if n := s.stop(t); n != 0 {
			t.Errorf("the squatter received %d bytes from the victim: %q", n, s.lines)
		}
	})

	// The squatter plants a symbolic link to a directory of its own.
	t.Run("symlink", func(t *testing.T) {
		l.clear(t)
		s := startSquatter(t, filepath.Join(l.bin, "nsdir.test"), l.victimDir+".real", l.victimDir, l.squatUID, l.squatGID)
		code, stderr := l.victim(t, "ollie", "ls", "/")
		if code == 0 {
			t.Errorf("ollie followed a planted symbolic link")
		}
		wantAll(t, "ollie's error", stderr, l.victimDir, "symbolic link", owner)
		code, stderr = l.victim(t, "olliesrv")
		if code == 0 {
			t.Errorf("olliesrv served through a planted symbolic link")
		}
		wantAll(t, "olliesrv's error", stderr, l.victimDir, "symbolic link", owner)
		if n := s.stop(t); n != 0 {
			t.Errorf("the squatter received %d bytes from the victim: %q", n, s.lines)
		}
	})
}
