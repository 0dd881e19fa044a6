package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
)

// helperEnv makes the test binary a helper run inside a namespace:
// "dial ADDR", "lookup NAME", "udp ADDR" or "serve ADDR".
const helperEnv = "NETLAB_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(strings.Fields(h)))
	}
	os.Exit(m.Run())
}

// helper prints what one network call gave, "ok" or "err: ERRNO-TEXT",
// and on a second line how long it took, in milliseconds.
func helper(a []string) int {
	var err error
	t0 := time.Now()
	defer func() { fmt.Println(time.Since(t0).Milliseconds()) }()
	switch a[0] {
	case "dial":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", a[1], 5*time.Second); err == nil {
			c.Close()
		}
	case "udp":
		var c net.Conn
		if c, err = net.Dial("udp", a[1]); err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
	case "lookup":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = net.DefaultResolver.LookupHost(ctx, a[1])
	case "serve":
		ln, err := net.Listen("tcp", a[1])
		if err != nil {
			fmt.Println("err:", err)
			return 1
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			fmt.Fprintln(c, "hello from inside")
			c.Close()
		}
	}
	if err != nil {
		fmt.Println("err:", err)
		return 0
	}
	fmt.Println("ok")
	return 0
}

// inside runs a helper in the namespace and returns what its call gave,
// and how long the call took.
func inside(t *testing.T, n *Net, args string) (string, time.Duration) {
	t.Helper()
	cmd := n.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+args)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	ms, err2 := strconv.Atoi(lines[len(lines)-1])
	if err != nil || err2 != nil || len(lines) != 2 {
		t.Fatalf("%s in %s: %v: %s", args, n.Name, err, out)
	}
	return lines[0], time.Duration(ms) * time.Millisecond
}

// TestNoWayOut: from inside, the internet has no route, a name lookup and
// the desktop's end of the link are refused, all at once and all counted;
// the desktop still reaches the namespace, and its replies are not counted.
func TestNoWayOut(t *testing.T) {
	n := New(t)
	if a, d := n.Outbound(); a != 0 {
		t.Fatalf("a new namespace has sent: %d, %s", a, d)
	}

	// The desktop reaches a server on the namespace's address: the
	// namespace's replies are on a connection opened to it.
	srv := n.Command(os.Args[0])
	srv.Env = append(os.Environ(), helperEnv+"=serve "+net.JoinHostPort(n.Addr, "7070"))
	waitServing(t, srv)
	if got := greeting(net.JoinHostPort(n.Addr, "7070")); got != "hello from inside" {
		t.Fatalf("the desktop could not reach %s:7070: %q", n.Addr, got)
	}
	if a, d := n.Outbound(); a != 0 {
		t.Errorf("replies to the desktop counted: %d, %s", a, d)
	}

	// A listener on the desktop's end of the link, which nothing inside
	// may reach.
	ln, err := net.Listen("tcp", net.JoinHostPort(n.Peer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()

	cases := []struct{ call, want string }{
		{"dial 1.1.1.1:443", syscall.ENETUNREACH.Error()},
		{"dial [2606:4700:4700::1111]:443", syscall.ENETUNREACH.Error()},
		{"dial " + ln.Addr().String(), syscall.EHOSTUNREACH.Error()},
		{"udp " + net.JoinHostPort(n.Peer, "9999"), syscall.EPERM.Error()},
		{"lookup example.com", "err:"},
	}
	for _, c := range cases {
		got, took := inside(t, n, c.call)
		if !strings.HasPrefix(got, "err:") || !strings.Contains(got, c.want) {
			t.Errorf("%s inside: %q, want an error with %q", c.call, got, c.want)
		}
		// The calls wait up to 5 s: a refusal is at once.
		if took > 2*time.Second {
			t.Errorf("%s inside took %v: it should fail at once, not time out", c.call, took)
		}
	}
	select {
	case <-accepted:
		t.Error("the desktop's listener got a connection from inside")
	case <-time.After(100 * time.Millisecond):
	}

	a, d := n.Outbound()
	t.Logf("outbound: %d: %s", a, d)
	// 1.1.1.1 and the IPv6 address: no route. The listener: one refused
	// SYN. UDP: one datagram. The lookup: at least one query to the
	// resolver, the desktop's end of the link.
	if a < 5 {
		t.Errorf("outbound %d (%s), want at least 5", a, d)
	}
	for _, want := range []string{
		"tcp " + ln.Addr().String() + " ×1",
		"udp " + n.Peer + ":9999 ×1",
		"udp " + n.Peer + ":53 ×",
		"no route 2 (IPv4 1, IPv6 1)",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("outbound detail %q lacks %q", d, want)
		}
	}
}

// TestLoopbackInside: a server on the namespace's loopback is reached from
// inside, not counted, and not reached from the desktop.
func TestLoopbackInside(t *testing.T) {
	n := New(t)
	srv := n.Command(os.Args[0])
	srv.Env = append(os.Environ(), helperEnv+"=serve 127.0.0.1:7071")
	waitServing(t, srv)
	if got, _ := inside(t, n, "dial 127.0.0.1:7071"); got != "ok" {
		t.Errorf("inside, 127.0.0.1:7071: %q", got)
	}
	if got := greeting(net.JoinHostPort(n.Addr, "7071")); got != "" {
		t.Errorf("the desktop reached the namespace's loopback server on %s: %q", n.Addr, got)
	}
	if got := greeting("127.0.0.1:7071"); got == "hello from inside" {
		t.Error("the desktop's loopback reached the namespace's server")
	}
	if a, d := n.Outbound(); a != 0 {
		t.Errorf("loopback counted as outbound: %d, %s", a, d)
	}
}

// TestClose: closing kills what runs inside and removes the namespace,
// its link and its /etc/netns directory; a namespace left by a killed test
// process is removed by the next.
func TestClose(t *testing.T) {
	n := New(t)
	srv := n.Command("sleep", "60")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	waitInside(t, n, srv.Process.Pid)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process inside still runs after Close")
	}
	gone(t, n)

	// A namespace named after a process that is gone, as a killed test
	// leaves it, with a process still inside. pid_max itself is never a
	// process's id.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	s := &Net{Name: prefix + strings.TrimSpace(string(b)) + "-1"}
	if out, err := execOut("ip", "netns", "add", s.Name); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { remove(s.Name) })
	if err := s.setup(); err != nil {
		t.Fatal(err)
	}
	left := s.Command("sleep", "60")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	leftDone := make(chan error, 1)
	go func() { leftDone <- left.Wait() }()
	waitInside(t, s, left.Process.Pid)
	RemoveStale()
	select {
	case <-leftDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the process inside a stale namespace still runs after RemoveStale")
	}
	gone(t, s)
}

// waitInside waits until ip netns exec has put pid inside n.
func waitInside(t *testing.T, n *Net, pid int) {
	t.Helper()
	await.Until(t, 5*time.Second, fmt.Sprintf("process %d inside %s", pid, n.Name),
		func() bool { return slices.Contains(n.Pids(), pid) })
}

func gone(t *testing.T, n *Net) {
	t.Helper()
	if _, err := os.Stat("/run/netns/" + n.Name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/run/netns/%s still there: %v", n.Name, err)
	}
	if _, err := os.Stat("/etc/netns/" + n.Name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/etc/netns/%s still there: %v", n.Name, err)
	}
	// The kernel destroys the link a moment after the namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if !await.Poll(ctx, func() bool { _, err := net.InterfaceByName(n.Link); return err != nil }) {
		t.Errorf("link %s still there", n.Link)
	}
}

// waitServing starts a serve helper, waits until it listens, and kills it
// when the test ends (Close kills it too).
func waitServing(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "listening\n" {
		t.Fatalf("server inside: %q, %v", line, err)
	}
}

// greeting is what a server at addr says, "" if it cannot be reached.
func greeting(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func execOut(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// TestListenInside: a listener this process opens in the namespace is
// reached from inside on its loopback, not from the desktop.
func TestListenInside(t *testing.T) {
	n := New(t)
	ln, err := n.Listen("tcp", "127.0.0.1:7072")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from inside\n"))
			c.Close()
		}
	}()
	if got, _ := inside(t, n, "dial 127.0.0.1:7072"); got != "ok" {
		t.Errorf("inside, 127.0.0.1:7072: %q", got)
	}
	if got := greeting("127.0.0.1:7072"); got == "hello from inside" {
		t.Error("the desktop's loopback reached the listener made in the namespace")
	}
}
