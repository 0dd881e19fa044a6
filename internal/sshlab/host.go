package sshlab

// One host's sshd: starting, stopping and restarting it, and finding,
// killing, freezing or thawing the processes that serve its connections.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Start starts the host's sshd again after Stop, on the same port.
func (h *Host) Start() {
	h.lab.t.Helper()
	if err := h.start(false); err != nil {
		h.lab.t.Fatalf("sshlab: %s: %v", h.Name, err)
	}
}

// start runs sshd and waits until it accepts connections. With newPort, a
// port taken by someone else between freePort and sshd's bind is replaced
// by another.
func (h *Host) start(newPort bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		return nil
	}
	var last error
	for try := 0; try < 5; try++ {
		if try > 0 {
			if !newPort {
				time.Sleep(100 * time.Millisecond)
			} else if err := h.lab.writeSshdConfig(h.index(), h); err != nil {
				return err
			}
		}
		if last = h.run(); last == nil {
			return nil
		}
	}
	return last
}

func (h *Host) index() int {
	for i, x := range h.lab.Hosts {
		if x == h {
			return i
		}
	}
	return -1
}

func (h *Host) run() error {
	logf, err := os.OpenFile(h.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", h.SshdConfig)
	if h.Net != nil {
		// ip execs sshd in place, so that cmd's process is sshd.
		cmd = h.Net.Command("/usr/sbin/sshd", "-D", "-e", "-f", h.SshdConfig)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Pdeathsig: a test binary killed before its cleanup takes its sshds along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	addr := net.JoinHostPort(h.Addr, strconv.Itoa(h.Port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			h.cmd, h.exited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(h.Log)
			return fmt.Errorf("sshd exited at start: %s", tail(b, 1000))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("sshd not accepting on %s after 10s", addr)
		}
	}
}

// Stop stops the host's sshd and every connection it serves, as a host
// going down does.
func (h *Host) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return
	}
	kids := descendants(h.cmd.Process.Pid)
	h.cmd.Process.Signal(syscall.SIGKILL)
	for _, p := range kids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	<-h.exited
	h.cmd = nil
}

// Outbound reports what an isolated host tried to reach besides its SSH
// sessions and loopback (netlab.Net.Outbound): attempts is 0 and detail
// "none" when it tried nothing. A host on loopback has no such proof:
// attempts is -1.
func (h *Host) Outbound() (attempts int, detail string) {
	if h.Net == nil {
		return -1, fmt.Sprintf("sshlab: %s is not isolated (Config.Isolated)", h.Name)
	}
	return h.Net.Outbound()
}

// Restart stops and starts the host's sshd.
func (h *Host) Restart() {
	h.Stop()
	h.Start()
}

// Pid returns the listening sshd's process id, 0 when stopped.
func (h *Host) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// KillConnections kills the processes serving the host's connections, so
// that each client sees its connection closed, while sshd keeps listening.
// It returns how many processes it killed.
func (h *Host) KillConnections() int {
	return h.signalConnections(syscall.SIGKILL)
}

// FreezeConnections stops (SIGSTOP) the processes serving the host's
// connections: the TCP connections stay open but nothing answers, as when
// a network path dies silently. Only a keepalive notices. The processes are
// killed by ThawConnections, Stop or the end of the test.
func (h *Host) FreezeConnections() int {
	n := h.signalConnections(syscall.SIGSTOP)
	h.lab.t.Cleanup(func() { h.ThawConnections() })
	return n
}

// ThawConnections lets frozen connections go on (SIGCONT).
func (h *Host) ThawConnections() int {
	return h.signalConnections(syscall.SIGCONT)
}

func (h *Host) signalConnections(sig syscall.Signal) int {
	pid := h.Pid()
	if pid == 0 {
		return 0
	}
	// The listener's descendants, and whoever holds one of the host's
	// established TCP connections: a [priv] process killed just as it
	// forks leaves its user child orphaned, outside the tree, holding the
	// connection.
	pids := map[int]bool{}
	for _, p := range descendants(pid) {
		pids[p] = true
	}
	for _, p := range h.connectionHolders() {
		if p != pid {
			pids[p] = true
		}
	}
	n := 0
	for p := range pids {
		if syscall.Kill(p, sig) == nil {
			n++
		}
	}
	return n
}

// connectionHolders are the processes with a file descriptor on an
// established TCP connection to the host's address and port.
func (h *Host) connectionHolders() []int {
	ip := net.ParseIP(h.Addr).To4()
	pid := h.Pid()
	if ip == nil || pid == 0 {
		return nil
	}
	// /proc/net/tcp writes the address as little-endian hex, then the port.
	// The listener's own view holds the connections of its network
	// namespace, an isolated host's too.
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], h.Port)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "01" { // 01: ESTABLISHED
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + e.Name() + "/fd")
		for _, fd := range fds {
			if t, err := os.Readlink("/proc/" + e.Name() + "/fd/" + fd.Name()); err == nil && inodes[t] {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// descendants lists the processes below pid, children first.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces; fields resume
		// after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// Pids lists the host's sshd processes: the listener, then the processes
// serving its connections and their sessions. Empty when stopped.
func (h *Host) Pids() []int {
	pid := h.Pid()
	if pid == 0 {
		return nil
	}
	return append([]int{pid}, descendants(pid)...)
}
