package appliance_test

// The listener's limits, attacked as a client would: connections that
// never log in, from one address and from many, and read-only sessions
// opened until the namespace would have no room for agents' tools. The
// clients are the test's own (x/crypto/ssh and bare TCP), so only the
// 20,000-connection flood needs more than go test: root, to raise
// RLIMIT_NOFILE.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"ollie/appliance"
	"ollie/host"
	"ollie/internal/await"
	"ollie/internal/lab"
	"ollie/ns"
	"ollie/ns/client"
)

// limitsHelper is the test binary as one of the processes these tests
// need, by mode; it returns the exit status.
//
//   - ro-hold: a read-only key's command that holds a connection to the
//     namespace: no_new_privs, as the listener's read-only commands run,
//     then "held" once the namespace answered, until its input ends.
//   - agent: starts agent-tool and passes on what it says: a tool is
//     never the daemon's own child, it is toolsrv's child's.
//   - agent-tool: no_new_privs, as every sandboxed tool has, then opens
//     $OLLIE_TEST_CONNS connections to the namespace at once, as that
//     many tools would, and says how many it answered: "connected N".
//   - daemon: a namespace and its listener with the default limits, in a
//     process of their own so that its memory and descriptors can be
//     measured; it prints the listener's port, and ends when its input
//     does.
//   - flood: opens $OLLIE_FLOOD_N connections to $OLLIE_FLOOD_ADDR from
//     the addresses in $OLLIE_FLOOD_FROM in turn, says how many it
//     opened, and holds them, silent, until its input ends: a flood in
//     processes of its own, each within its RLIMIT_NOFILE.
func limitsHelper(mode string) int {
	sock := filepath.Join(os.Getenv("NAMESPACE"), "ollie")
	switch mode {
	case "ro-hold":
		if err := appliance.ReadOnly(); err != nil {
			fmt.Println("refused:", err)
			return 1
		}
		c, err := dialStatus(sock)
		if err != nil {
			fmt.Println("refused:", err)
			return 1
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin)
		c.Close()
		return 0
	case "agent":
		exe, err := os.Executable()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		cmd := exec.Command(exe)
		cmd.Env = []string{helperEnv + "=agent-tool", "NAMESPACE=" + os.Getenv("NAMESPACE"), "OLLIE_TEST_CONNS=" + os.Getenv("OLLIE_TEST_CONNS")}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return 1
		}
		return 0
	case "agent-tool":
		if err := appliance.ReadOnly(); err != nil {
			fmt.Println(err)
			return 1
		}
		n, _ := strconv.Atoi(os.Getenv("OLLIE_TEST_CONNS"))
		var dialed, done sync.WaitGroup
		var connected atomic.Int64
		var refused atomic.Value
		dialed.Add(n)
		for range n {
			done.Go(func() {
				c, err := dialStatus(sock)
				dialed.Done()
				if err != nil {
					refused.Store(err.Error())
					return
				}
				connected.Add(1)
				dialed.Wait() // all open at once
				c.Close()
			})
		}
		done.Wait()
		fmt.Println("connected", connected.Load())
		if r := refused.Load(); r != nil {
			fmt.Println("refused:", r)
		}
		return 0
	case "daemon":
		return runDaemon()
	case "flood":
		n, _ := strconv.Atoi(os.Getenv("OLLIE_FLOOD_N"))
		conns, failed := flood(os.Getenv("OLLIE_FLOOD_ADDR"), n, strings.Split(os.Getenv("OLLIE_FLOOD_FROM"), ","))
		fmt.Println(len(conns), failed)
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	return 2
}

// flood opens n connections to addr, from the sources in turn, and
// returns them, silent, and how many could not connect.
func flood(addr string, n int, sources []string) (conns []net.Conn, failed int) {
	var mu sync.Mutex
	next := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for src := range next {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second, Control: portAtConnect}
				c, err := d.Dial("tcp", addr)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- sources[i%len(sources)]
	}
	close(next)
	wg.Wait()
	return conns, failed
}

// readStatus connects to the namespace socket and reads status.
func readStatus(sock string) error {
	c, err := dialStatus(sock)
	if err == nil {
		c.Close()
	}
	return err
}

// dialStatus connects to the namespace socket and reads status, leaving
// the connection open.
func dialStatus(sock string) (*client.Conn, error) {
	c, err := client.DialTimeout(sock, "", 5*time.Second)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := c.ReadAll(ctx, "status")
	if err == nil && !strings.Contains(string(b), "version") {
		err = fmt.Errorf("status without a version: %q", b)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// runDaemon serves a namespace in $NAMESPACE and the listener, with the
// default limits, from the keys in $OLLIE_SSHD_TEST_DIR.
func runDaemon() int {
	dir, nsDir := os.Getenv("OLLIE_SSHD_TEST_DIR"), os.Getenv("NAMESPACE")
	d, err := host.Start(host.Config{Dir: nsDir, StateDir: filepath.Join(dir, "state"), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &appliance.Server{
		HostKey:        filepath.Join(dir, "hostkey", appliance.HostKeyFile),
		AuthorizedKeys: filepath.Join(dir, "authorized_keys"),
		Namespace:      nsDir,
		Ollie: func(args []string, readOnly bool) *exec.Cmd {
			cmd := exec.Command(exe, args...)
			cmd.Env = []string{helperEnv + "=rw"}
			return cmd
		},
		Env: []string{"HOME=" + dir, "XDG_STATE_HOME=" + filepath.Join(dir, "xdgstate"), "PATH=" + os.Getenv("PATH")},
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	go srv.Serve(ln)
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	d.Shutdown(ctx)
	return 0
}

// dialFrom opens a TCP connection to the listener from the loopback
// address src, which says nothing after.
func (f *fixture) dialFrom(src string) net.Conn {
	f.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.port)))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// admitted reports whether the listener took c: it speaks first, its
// version line, to a connection it serves; one it drops ends.
func admitted(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	line, err := bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the listener neither spoke nor hung up in 5 s")
	}
	return strings.HasPrefix(line, "SSH-2.0-")
}

// admittedFrom dials from src until the listener admits a connection,
// for when a slot it holds is being given back; it fails t after 5 s.
func (f *fixture) admittedFrom(src string) net.Conn {
	f.t.Helper()
	var c net.Conn
	await.Until(f.t, 5*time.Second, "a connection from "+src+" admitted", func() bool {
		c = f.dialFrom(src)
		if admitted(f.t, c) {
			return true
		}
		c.Close()
		return false
	})
	return c
}

// login logs in from src with the key in file, by x/crypto/ssh, checking
// the listener's host key.
func (f *fixture) login(src, keyFile string) (*ssh.Client, error) {
	f.t.Helper()
	b, err := os.ReadFile(keyFile)
	if err != nil {
		f.t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		f.t.Fatal(err)
	}
	hostKey, err := appliance.LoadHostKey(f.hostKey)
	if err != nil {
		f.t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(f.port))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	conf := &ssh.ClientConfig{User: "ollie", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())}
	c, chans, reqs, err := ssh.NewClientConn(nc, addr, conf)
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	cl := ssh.NewClient(c, chans, reqs)
	f.t.Cleanup(func() { cl.Close() })
	return cl, nil
}

// countLog counts the lines of log holding what.
func countLog(log *syncBuffer, what string) int {
	n := 0
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, what) {
			n++
		}
	}
	return n
}

// TestLoginGraceTime: a connection that has not logged in when
// LoginGraceTime is up is closed, whether it said nothing or stalled in
// the handshake; one that logged in stays.
func TestLoginGraceTime(t *testing.T) {
	const grace = 300 * time.Millisecond
	f := newFixture(t, "", func(s *appliance.Server) { s.LoginGraceTime = grace })
	idle := f.dialFrom("127.0.0.2")
	stalled := f.dialFrom("127.0.0.3")
	io.WriteString(stalled, "SSH-2.0-stalled\r\n")
	began := time.Now()
	for name, c := range map[string]net.Conn{"an idle connection": idle, "a connection stalled after its version": stalled} {
		if !admitted(t, c) {
			t.Fatalf("%s: dropped at once", name)
		}
		c.SetReadDeadline(began.Add(5 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: still open 5 s after it connected (LoginGraceTime %v)", name, grace)
		}
	}
	// The server's clock starts when it accepts, after began: a few
	// milliseconds of scheduling either way are not a closing too early.
	if d := time.Since(began); d < grace-10*time.Millisecond {
		t.Errorf("closed after %v, before LoginGraceTime (%v)", d, grace)
	}
	waitLog(t, f.log, "limit=LoginGraceTime from=127.0.0.")

	cl, err := f.login("127.0.0.1", f.key)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	// Outlasting LoginGraceTime is the point: the limit is for logins
	// under way, not for connections logged in.
	await.For(t.Context(), 3*grace)
	if _, _, err := cl.SendRequest("keepalive@openssh.com", true, nil); err != nil {
		t.Errorf("a logged-in connection, after LoginGraceTime: %v", err)
	}
}

// TestMaxStartups: past Start connections not yet logged in, a new one is
// dropped with a chance rising from Rate% to 100% at Full, as OpenSSH's
// MaxStartups. The listener's draws are the test's: 99 (dropped only at
// Full), then 0 (dropped from Start on).
func TestMaxStartups(t *testing.T) {
	var draw atomic.Int64
	f := newFixture(t, "", func(s *appliance.Server) {
		s.MaxStartups = appliance.Startups{Start: 2, Rate: 30, Full: 4}
		appliance.SetIntn(s, func(int) int { return int(draw.Load()) })
	})
	// From an address each: the per-source limit is not what drops them.
	src := func(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }
	draw.Store(99)
	var held []net.Conn
	for i := range 4 {
		c := f.dialFrom(src(i))
		if !admitted(t, c) {
			t.Fatalf("connection %d of 4 (Full) dropped with the draw at 99", i+1)
		}
		held = append(held, c)
	}
	for i := range 3 {
		if admitted(t, f.dialFrom(src(4+i))) {
			t.Fatalf("a connection past Full (4) admitted")
		}
	}
	// Below Full again: the draw decides.
	held[3].Close()
	f.admittedFrom(src(8)).Close() // Full - 1 held: admitted at 99
	draw.Store(0)
	if admitted(t, f.dialFrom(src(9))) {
		t.Errorf("with %d held (Start 2) and the draw at 0, a connection was admitted", 3)
	}
	held[2].Close()
	held[1].Close()
	f.admittedFrom(src(10)).Close() // 1 held: under Start, admitted whatever the draw
	if n := countLog(f.log, "limit=MaxStartups "); n != 1 {
		t.Errorf("MaxStartups logged %d times, want once:\n%s", n, f.log)
	}
	// An authorized key gets in once there is room: as soon as the
	// listener has seen the others close.
	held[0].Close()
	var err error
	await.Until(t, 5*time.Second, "a login with none held", func() bool {
		_, err = f.login("127.0.0.1", f.key)
		return err == nil
	}, func() string { return fmt.Sprint(err) })
}

// TestMaxStartupsPerSource: one address holds at most
// DefaultMaxStartupsPerSource connections not yet logged in; others'
// connections and logins are not dropped for it, and logged-in
// connections do not count.
func TestMaxStartupsPerSource(t *testing.T) {
	f := newFixture(t, "", nil)
	n := appliance.DefaultMaxStartupsPerSource
	var held []net.Conn
	for i := range n {
		c := f.dialFrom("127.0.0.2")
		if !admitted(t, c) {
			t.Fatalf("connection %d of %d from one address dropped", i+1, n)
		}
		held = append(held, c)
	}
	for range 20 {
		if admitted(t, f.dialFrom("127.0.0.2")) {
			t.Fatalf("connection %d from one address admitted (limit %d)", n+1, n)
		}
	}
	if n := countLog(f.log, "limit=MaxStartupsPerSource"); n != 1 {
		t.Errorf("MaxStartupsPerSource logged %d times for 20 drops, want once:\n%s", n, f.log)
	}
	waitLog(t, f.log, "from=127.0.0.2")
	if !admitted(t, f.dialFrom("127.0.0.3")) {
		t.Errorf("a connection from another address dropped")
	}
	if _, err := f.login("127.0.0.1", f.key); err != nil {
		t.Errorf("a login from another address: %v", err)
	}
	// Logged in, a connection leaves its address's count.
	for i := range 2 * n {
		if _, err := f.login("127.0.0.4", f.key); err != nil {
			t.Fatalf("login %d from one address, the others logged in and held: %v", i+1, err)
		}
	}
	held[0].Close()
	f.admittedFrom("127.0.0.2")
}

// TestReadOnlySessionsCap: a read-only key's sessions are capped by the
// listener, and the namespace connections they hold are not counted with
// agents' tools: with 70 opened (more than the namespace's 64 for
// sandboxed peers), tools still have all 64.
func TestReadOnlySessionsCap(t *testing.T) {
	f := newFixture(t, "ro-hold", nil)
	ro, pub := f.newKey("reader")
	f.authorize(appliance.ReadOnlyOption, pub)
	cl, err := f.login("127.0.0.1", ro)
	if err != nil {
		t.Fatal(err)
	}
	const sessions = 70
	var rejected int
	var outs []*bufio.Reader
	var open []*ssh.Session
	for i := range sessions {
		s, err := cl.NewSession()
		var oce *ssh.OpenChannelError
		if errors.As(err, &oce) && oce.Reason == ssh.ResourceShortage {
			rejected++
			continue
		}
		if err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		out, err := s.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.StdinPipe(); err != nil { // held open: the command holds its connection
			t.Fatal(err)
		}
		if err := s.Start("ls"); err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		open = append(open, s)
		outs = append(outs, bufio.NewReader(out))
	}
	defer func() {
		for _, s := range open {
			s.Close()
		}
	}()
	var mu sync.Mutex
	said := map[string]int{}
	var wg sync.WaitGroup
	for _, out := range outs {
		wg.Go(func() {
			line, err := out.ReadString('\n')
			if err != nil {
				line = "no line: " + err.Error()
			}
			if strings.HasPrefix(line, "refused:") {
				line = "refused" // by the namespace, which says why
			}
			mu.Lock()
			said[strings.TrimSpace(line)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d read-only sessions: %d rejected by the listener, their commands said %v", sessions, rejected, said)
	if max := appliance.DefaultMaxReadOnlySessions; said["held"] > max || rejected != sessions-max {
		t.Errorf("%d read-only sessions held the namespace and %d were rejected; want at most %d and the other %d rejected",
			said["held"], rejected, max, sessions-max)
	}

	agent := exec.Command(os.Args[0])
	agent.Env = []string{helperEnv + "=agent", "NAMESPACE=" + f.ns, fmt.Sprintf("OLLIE_TEST_CONNS=%d", ns.DefaultMaxSandboxedConns)}
	out, err := agent.CombinedOutput()
	if want := fmt.Sprintf("connected %d\n", ns.DefaultMaxSandboxedConns); err != nil || string(out) != want {
		t.Errorf("sandboxed tools, with %d read-only sessions held: %v: %s; want %s", said["held"], err, out, want)
	}
	if rejected > 0 {
		if n := countLog(f.log, "limit=MaxReadOnlySessions"); n != 1 {
			t.Errorf("MaxReadOnlySessions logged %d times, want once:\n%s", n, f.log)
		}
		// One ended makes room for one more.
		open[0].Close()
		var err error
		await.Until(t, 5*time.Second, "a read-only session after one ended", func() bool {
			var s *ssh.Session
			if s, err = cl.NewSession(); err == nil {
				s.Close()
			}
			return err == nil
		}, func() string { return fmt.Sprint(err) })
	}
}

// daemonProc is the daemon helper, as the flood test sees it.
type daemonProc struct {
	*fixture
	pid int
}

// startDaemon starts the test binary as a namespace and its listener
// with the default limits, and an admin key for it.
func startDaemon(t *testing.T) *daemonProc {
	dir := t.TempDir()
	nsDir, err := os.MkdirTemp("", "sshd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nsDir) })
	f := &fixture{t: t, dir: dir, ns: nsDir, authKeys: filepath.Join(dir, "authorized_keys"),
		hostKey: filepath.Join(dir, "hostkey", appliance.HostKeyFile), log: &syncBuffer{}}
	var pub string
	f.key, pub = f.newKey("admin")
	f.authorize("", pub)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=daemon", "OLLIE_SSHD_TEST_DIR="+dir, "NAMESPACE="+nsDir)
	cmd.Stderr = f.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if f.port, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		t.Fatalf("the daemon said %q: %v\n%s", line, err, f.log)
	}
	return &daemonProc{fixture: f, pid: cmd.Process.Pid}
}

// memory is the daemon's resident memory now and at its highest, in
// MiB, from /proc/PID/status.
func (d *daemonProc) memory() (rss, hwm int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.pid))
	if err != nil {
		d.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			rss = kb >> 10
		case "VmHWM":
			hwm = kb >> 10
		}
	}
	return rss, hwm
}

// fds counts the daemon's open file descriptors.
func (d *daemonProc) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.pid))
	if err != nil {
		d.t.Fatal(err)
	}
	return len(ents)
}

// portAtConnect leaves the choice of a socket's local port to connect,
// which picks among those free for the destination, rather than to bind,
// which searches every port the address has bound: thousands of
// connections from one address would take seconds more each thousand.
func portAtConnect(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// floodFrom opens n connections to the listener from the sources in
// turn, in helper processes of floodPerProcess each, and holds them until
// the test ends or the returned stop is called; it returns how many were
// opened and how many could not connect.
func floodFrom(t *testing.T, port, n int, sources []string) (opened, failed int, stop func()) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
		stops = nil
	}
	t.Cleanup(stop)
	type result struct{ opened, failed int }
	results := make(chan result)
	for left := n; left > 0; left -= floodPerProcess {
		cmd := exec.Command(os.Args[0])
		cmd.Env = []string{helperEnv + "=flood", fmt.Sprintf("OLLIE_FLOOD_N=%d", min(left, floodPerProcess)),
			fmt.Sprintf("OLLIE_FLOOD_ADDR=127.0.0.1:%d", port), "OLLIE_FLOOD_FROM=" + strings.Join(sources, ",")}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		stops = append(stops, func() { stdin.Close(); cmd.Wait() })
		go func() {
			var r result
			if _, err := fmt.Fscan(stdout, &r.opened, &r.failed); err != nil {
				r.failed = -1
			}
			results <- r
		}()
	}
	for range stops {
		r := <-results
		if r.failed < 0 {
			t.Fatal("a flood process said nothing")
		}
		opened += r.opened
		failed += r.failed
	}
	return opened, failed, stop
}

// floodPerProcess is how many connections one flood process holds: well
// within the RLIMIT_NOFILE a process has here (20,000 on the lab's
// machines, and no CAP_SYS_RESOURCE to raise it).
const floodPerProcess = 5000

// TestFlood: 20,000 connections that never log in, from one address and
// then from 200, cost the daemon little memory and few descriptors; its
// namespace keeps answering, and during the first an authorized key logs
// in within 2 s.
func TestFlood(t *testing.T) {
	if !lab.On() {
		t.Skip("40,000 connections: the lab tier runs it (make test, or OLLIE_LAB=1)")
	}
	testBegan := time.Now()
	d := startDaemon(t)
	rss, _ := d.memory()
	t.Logf("daemon at rest: RSS %d MiB, %d descriptors", rss, d.fds())

	check := func(phase string, wantLogin bool) {
		t.Helper()
		began := time.Now()
		if err := readStatus(filepath.Join(d.ns, "ollie")); err != nil {
			t.Errorf("%s: the namespace: %v", phase, err)
		}
		t.Logf("%s: the namespace answered in %v", phase, time.Since(began).Round(time.Millisecond))
		began = time.Now()
		cl, err := d.login("127.0.0.1", d.key)
		var out []byte
		if err == nil {
			var s *ssh.Session
			if s, err = cl.NewSession(); err == nil {
				out, err = s.Output("read status")
			}
			cl.Close()
		}
		took := time.Since(began)
		switch {
		case wantLogin && (err != nil || !strings.Contains(string(out), "version")):
			t.Errorf("%s: an authorized key's read status: %v, %q", phase, err, out)
		case wantLogin && took > 2*time.Second:
			t.Errorf("%s: an authorized key's login and read status took %v, want under 2 s", phase, took)
		}
		t.Logf("%s: an authorized key's login and read status: %v in %v", phase, err, took.Round(time.Millisecond))
		rss, hwm := d.memory()
		fds := d.fds()
		t.Logf("%s: daemon RSS %d MiB (peak %d MiB), %d descriptors", phase, rss, hwm, fds)
		if hwm >= 100 {
			t.Errorf("%s: the daemon's RSS peaked at %d MiB, want under 100", phase, hwm)
		}
		if fds > 500 {
			t.Errorf("%s: the daemon holds %d descriptors", phase, fds)
		}
	}

	began := time.Now()
	opened, failed, stop := floodFrom(t, d.port, 20000, []string{"127.0.0.2"})
	t.Logf("20,000 connections from one address in %v: %d opened, %d failed to connect", time.Since(began).Round(time.Millisecond), opened, failed)
	check("20,000 from one address", true)
	stop()

	var sources []string
	for i := range 200 {
		sources = append(sources, fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250))
	}
	began = time.Now()
	opened, failed, _ = floodFrom(t, d.port, 20000, sources)
	t.Logf("20,000 connections from 200 addresses in %v: %d opened, %d failed to connect", time.Since(began).Round(time.Millisecond), opened, failed)
	// MaxStartups is full now, as OpenSSH's would be: logins wait for
	// LoginGraceTime to free it. The daemon and its namespace stand.
	check("20,000 from 200 addresses", false)
	// Each limit is logged at its first drop, then once every 10 s at
	// most while it drops.
	most := 1 + int(time.Since(testBegan)/(10*time.Second))
	for _, limit := range []string{"MaxStartupsPerSource", "MaxStartups "} {
		if n := countLog(d.log, "limit="+limit); n < 1 || n > most {
			t.Errorf("%s logged %d times in %v, want 1 to %d", limit, n, time.Since(testBegan).Round(time.Second), most)
		}
	}
}
