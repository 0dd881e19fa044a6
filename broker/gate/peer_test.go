package gate_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/broker/gate"
)

// The gate's peer check is tested with real processes: the test binary
// re-executed as an asker, once as it is and once sandboxed the way every
// Landlock-confined tool is (no_new_privs, which it cannot shed).
const (
	gateAskerEnv = "OLLIE_BROKER_GATE_ASKER" // the gate's socket
	gateNNPEnv   = "OLLIE_BROKER_GATE_NNP"   // "set": set no_new_privs, then re-exec; "on": it is set
)

// TestGateAskerProcess is the asker in a child process: it asks the gate
// at $OLLIE_BROKER_GATE_ASKER for a sudo run of its own executable and
// prints what came back.
func TestGateAskerProcess(t *testing.T) {
	sock := os.Getenv(gateAskerEnv)
	if sock == "" {
		return
	}
	switch os.Getenv(gateNNPEnv) {
	case "set":
		// no_new_privs is per thread: set it on this one, then exec, so
		// that the whole new image carries it as a sandboxed tool does.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fmt.Println("error prctl:", err)
			os.Exit(0)
		}
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, gateNNPEnv+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, gateNNPEnv+"=on")
		err := syscall.Exec("/proc/self/exe", os.Args, env)
		fmt.Println("error exec:", err)
		os.Exit(0)
	case "on":
		status, _ := os.ReadFile("/proc/self/status")
		if !strings.Contains(string(status), "NoNewPrivs:\t1") {
			fmt.Println("error: no_new_privs is not set after prctl and exec")
			os.Exit(0)
		}
	}
	exe, _ := os.Executable()
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Println("error dial:", err)
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cv, ans, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "become_root", Executable: exe, Cwd: "/", Sudo: true})
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(0)
	}
	cv.Close("ran")
	fmt.Println("answer", ans.Decision)
	os.Exit(0)
}

// syncBuffer is a log destination the gate's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGateRefusesSandboxedAsker runs the asker three ways against a gate
// that trusts the test binary and relays to a desktop that approves
// everything: unsandboxed it is approved (so the check below can fail);
// with no_new_privs, or as another executable, it is refused before the
// desktop is asked.
func TestGateRefusesSandboxedAsker(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var log syncBuffer
	gate := gate.New(slog.New(slog.NewTextHandler(&log, nil)))
	gate.TrustExe = self
	gateSock := filepath.Join(dir, "elevate")
	gl, err := net.Listen("unix", gateSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	go gate.Serve(gl)
	desk := &scripted{decision: broker.Once}
	bsock := filepath.Join(dir, "broker")
	bl, err := net.Listen("unix", bsock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bl.Close() })
	go (&desktop.Broker{Approver: desk}).Serve("web1", bl)
	if err := gate.Register(bsock); err != nil {
		t.Fatal(err)
	}

	// Another executable: a copy of the test binary elsewhere.
	other := filepath.Join(dir, "not-ollie")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(other, os.O_CREATE|os.O_WRONLY, 0755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()

	ask := func(exe, nnp string) string {
		t.Helper()
		cmd := exec.Command(exe, "-test.run=^TestGateAskerProcess$")
		cmd.Env = append(os.Environ(), gateAskerEnv+"="+gateSock, gateNNPEnv+"="+nnp)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("asker: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	asked := func() int {
		desk.mu.Lock()
		defer desk.mu.Unlock()
		return len(desk.asked)
	}

	if got := ask(self, ""); got != "answer once" {
		t.Fatalf("unsandboxed toolsrv-like asker: %q, want it approved by the desktop (answer once)", got)
	}
	if asked() != 1 {
		t.Fatalf("the desktop was asked %d times, want 1", asked())
	}

	got := ask(self, "set")
	if !strings.HasPrefix(got, "refused:") {
		t.Errorf("a sandboxed (no_new_privs) asker got %q, want it refused", got)
	}
	if !strings.Contains(log.String(), "sandboxed (no_new_privs)") {
		t.Errorf("the gate's log does not say why it refused the sandboxed asker:\n%s", log.String())
	}

	if got := ask(other, ""); !strings.HasPrefix(got, "refused:") {
		t.Errorf("an asker running %s got %q, want it refused", other, got)
	}
	if !strings.Contains(log.String(), "not ollie's toolsrv") {
		t.Errorf("the gate's log does not say why it refused another executable:\n%s", log.String())
	}
	if n := asked(); n != 1 {
		t.Errorf("the desktop was asked %d times: a refused asker reached it", n)
	}
}
