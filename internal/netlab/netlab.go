// Package netlab makes network namespaces with no way out, for tests of a
// host that cannot reach the internet: a namespace whose only link is a
// veth pair to the root namespace (the desktop), with no default route, so
// that the one thing it can reach is the desktop's end of that link.
//
//	root namespace (the test, "the desktop")    namespace NAME ("the host")
//	olnetX 10.201.X.1/30  <────── veth ──────>  eth0 10.201.X.2/30, lo
//
// A firewall in the namespace (nftables) refuses every packet the
// namespace starts on its link, and counts it: only loopback and the
// packets of connections someone else opened to it (the desktop's SSH
// session) go out. Outbound reports those refusals, and the kernel's count
// of sends that found no route (the internet), as the proof that the host
// opened no connection of its own. See Outbound for what counts.
//
// A test uses it through internal/sshlab (Config.Isolated puts each host's
// sshd in a namespace of its own), or alone:
//
//	n := netlab.New(t)                        // removed when t ends
//	srv := n.Command("/path/to/server", "-listen", "127.0.0.1:11434")
//	// ... the host's commands reach 127.0.0.1:11434; the desktop does not
//	if a, d := n.Outbound(); a != 0 {
//		t.Errorf("the host tried to get out: %d: %s", a, d)
//	}
//
// It needs root, iproute2 (ip) and nftables (nft); without them New skips
// the test in plain go test and fails it in the lab tier (internal/lab).
// Namespaces are named after the test process (olab-PID-N), so that a
// later run removes those of a process killed before its cleanup.
package netlab

import (
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ollie/internal/lab"
)

// Net is a network namespace whose only link leads to the root namespace.
type Net struct {
	Name string // the namespace, for ip netns exec: "olab-PID-N"
	Addr string // the namespace's end of the link: "10.201.X.2"
	Peer string // the root namespace's end: "10.201.X.1"
	Link string // the root namespace's interface: "olnetX"

	closed atomic.Bool
}

// prefix starts every namespace's name; the test process's id follows.
const prefix = "olab-"

// linkPrefix starts the root namespace's end of each link. Interface names
// are at most 15 bytes; the third byte of the link's addresses follows.
const linkPrefix = "olnet"

// DevName is the namespace's end of the link.
const DevName = "eth0"

var seq atomic.Int64

// Check reports what is missing to make a namespace: root, ip or nft.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("netlab: needs root (it makes network namespaces)")
	}
	for _, p := range []string{"ip", "nft"} {
		if tool(p) == "" {
			return fmt.Errorf("netlab: %s not found", p)
		}
	}
	return nil
}

// tool is the path of an administration command, looked for on PATH and
// then in /usr/sbin and /sbin, which a root PATH may lack; "" if missing.
func tool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// ip returns the command ip args...
func ip(args ...string) *exec.Cmd { return exec.Command(tool("ip"), args...) }

// New makes a namespace for t, and removes it, with every process in it,
// when the test ends.
func New(t testing.TB) *Net {
	t.Helper()
	if err := Check(); err != nil {
		lab.Need(t, false, fmt.Sprintf("%v (run .ci/run, or apt-get install iproute2 nftables, as root)", err))
	}
	n, err := Create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// Create makes a namespace; the caller must Close it. It first removes the
// namespaces of test processes that are gone.
func Create() (*Net, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	RemoveStale()
	n := &Net{Name: fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))}
	if out, err := ip("netns", "add", n.Name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("netlab: ip netns add %s: %v: %s", n.Name, err, out)
	}
	if err := n.setup(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Net) setup() error {
	// The root namespace's interface name is the lock on the link's
	// addresses: ip link add fails if another lab, in this process or
	// another, holds it.
	var x int
	var last []byte
	for x = 1; x <= 254; x++ {
		link := linkPrefix + strconv.Itoa(x)
		out, err := ip("link", "add", link, "type", "veth", "peer", "name", DevName, "netns", n.Name).CombinedOutput()
		if err == nil {
			n.Link = link
			break
		}
		last = out
	}
	if n.Link == "" {
		return fmt.Errorf("netlab: %s: no free link olnet1–254: ip link add: %s", n.Name, last)
	}
	n.Addr = fmt.Sprintf("10.201.%d.2", x)
	n.Peer = fmt.Sprintf("10.201.%d.1", x)
	// Before the link is up, so that nothing leaves uncounted: IPv6 is off
	// on the link (its neighbour discovery would be the namespace's own
	// packets; loopback keeps ::1), the firewall is in place, and the
	// resolver is the desktop's end of the link, so that a name lookup is
	// a packet the firewall counts and refuses on any machine (the
	// machine's own resolver may be on a loopback address, which in the
	// namespace is its own, empty loopback). ip netns exec bind-mounts
	// /etc/netns/NAME/resolv.conf over /etc/resolv.conf.
	steps := [][]string{
		{"netns", "exec", n.Name, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/" + DevName + "/disable_ipv6"},
		{"netns", "exec", n.Name, tool("nft"), "-f", "-"},
		{"addr", "add", n.Peer + "/30", "dev", n.Link},
		{"-n", n.Name, "addr", "add", n.Addr + "/30", "dev", DevName},
		{"-n", n.Name, "link", "set", "lo", "up"},
		{"-n", n.Name, "link", "set", DevName, "up"},
		{"link", "set", n.Link, "up"},
	}
	etc := filepath.Join("/etc/netns", n.Name)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return fmt.Errorf("netlab: %v", err)
	}
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+n.Peer+"\n"), 0o644); err != nil {
		return fmt.Errorf("netlab: %v", err)
	}
	for _, s := range steps {
		cmd := ip(s...)
		if s[len(s)-1] == "-" {
			cmd.Stdin = strings.NewReader(ruleset)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("netlab: %s: ip %s: %v: %s", n.Name, strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// Command returns a command that runs name with args inside the namespace
// (ip netns exec NAME name args...), as root. It shares the machine's
// files: a Unix socket it binds is reached from any namespace.
func (n *Net) Command(name string, args ...string) *exec.Cmd {
	return ip(append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Pids lists the processes inside the namespace.
func (n *Net) Pids() []int { return pidsIn(nsInode(n.Name)) }

// Close kills every process inside the namespace and removes it, its link
// and its /etc/netns directory. Closing twice does nothing.
func (n *Net) Close() error {
	if n.closed.Swap(true) {
		return nil
	}
	return remove(n.Name)
}

// nsInode is the inode of the namespace named name, which
// /proc/PID/ns/net shows for each process inside; 0 if there is none.
func nsInode(name string) uint64 {
	fi, err := os.Stat(filepath.Join("/run/netns", name))
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// pidsIn lists the processes whose network namespace has inode ino.
func pidsIn(ino uint64) []int {
	if ino == 0 {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", ino)
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && l == want {
			pids = append(pids, p)
		}
	}
	return pids
}

// killIn kills the processes in namespace ino until none is left: one may
// fork while it is being killed.
func killIn(name string, ino uint64) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := pidsIn(ino)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netlab: %s: processes %v still running after SIGKILL", name, pids)
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// remove kills what runs in the namespace and deletes it. The veth pair
// goes with it: the kernel destroys both ends when the namespace holding
// one of them is gone.
func remove(name string) error {
	os.RemoveAll(filepath.Join("/etc/netns", name))
	ino := nsInode(name)
	if ino == 0 {
		return nil
	}
	if err := killIn(name, ino); err != nil {
		return err
	}
	if out, err := ip("netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("netlab: ip netns del %s: %v: %s", name, err, out)
	}
	// A process that opened the namespace before it was deleted (ip netns
	// exec starting) may have entered it since.
	return killIn(name, ino)
}

// RemoveStale removes the namespaces of test processes that are gone
// (killed before their cleanup ran), with what still runs in them.
func RemoveStale() {
	seen := map[string]bool{}
	for _, dir := range []string{"/run/netns", "/etc/netns"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if seen[e.Name()] || !stale(e.Name()) {
				continue
			}
			seen[e.Name()] = true
			remove(e.Name())
		}
	}
}

// stale reports whether name is a lab namespace of a process that is gone.
func stale(name string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	f := strings.Split(rest, "-")
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// Listen opens a listener inside the namespace, served by this process:
// a scripted server the host's commands reach (on its loopback, say) and
// the desktop does not. The socket belongs to the namespace it was made
// in, whichever thread later accepts on it.
func (n *Net) Listen(network, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread enters the namespace, makes the socket and goes
		// back to its own namespace before the scheduler may use it
		// again. It must not be thrown away instead: a thread's end
		// sends Pdeathsig to every process it started (go.dev/issue/27505),
		// and this thread may have started a lab's sshd, which then
		// stops listening (the air-gapped tests failed so, now and then).
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer home.Close()
		ns, err := os.Open("/run/netns/" + n.Name)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("setns %s: %w", n.Name, err)}
			return
		}
		ln, err := net.Listen(network, addr)
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else it stays locked, and ends with this goroutine
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}
