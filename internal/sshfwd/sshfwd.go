// Package sshfwd is what both of ollie's SSH servers (the appliance
// listener, appliance, and make demo's hosts, internal/demohost) share of
// SSH's own protocol: stream-local forwards (copying a channel and a
// socket both ways, a forwarded connection carried back to the client,
// the sockets listened on for each connection) and the signal names of
// RFC 4254.
package sshfwd

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/crypto/ssh"
)

// Splice copies both ways, passing each side's EOF on, until both ends
// are done; then it closes both.
func Splice(ch ssh.Channel, c *net.UnixConn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(c, ch)
		c.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		io.Copy(ch, c)
		ch.CloseWrite()
	}()
	wg.Wait()
	ch.Close()
	c.Close()
}

// Forwards are the sockets a server listens on for its clients, by
// connection and path. The zero value is empty and ready.
type Forwards struct {
	mu sync.Mutex
	ls map[*ssh.ServerConn]map[string]net.Listener
}

func (f *Forwards) Add(conn *ssh.ServerConn, path string, ln net.Listener) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ls == nil {
		f.ls = map[*ssh.ServerConn]map[string]net.Listener{}
	}
	if f.ls[conn] == nil {
		f.ls[conn] = map[string]net.Listener{}
	}
	if _, dup := f.ls[conn][path]; dup {
		return false
	}
	f.ls[conn][path] = ln
	return true
}

// Remove stops one forward, or every forward of conn when path is "".
func (f *Forwards) Remove(conn *ssh.ServerConn, path string) bool {
	f.mu.Lock()
	var ls []net.Listener
	for p, ln := range f.ls[conn] {
		if path == "" || p == path {
			ls = append(ls, ln)
			delete(f.ls[conn], p)
		}
	}
	if len(f.ls[conn]) == 0 {
		delete(f.ls, conn)
	}
	f.mu.Unlock()
	for _, ln := range ls {
		ln.Close() // a UnixListener it created removes the socket file
	}
	return len(ls) > 0
}

func (f *Forwards) Holds(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ls := range f.ls {
		if _, ok := ls[path]; ok {
			return true
		}
	}
	return false
}

func (f *Forwards) CloseAll() {
	f.mu.Lock()
	var conns []*ssh.ServerConn
	for c := range f.ls {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		f.Remove(c, "")
	}
}

// Reverse carries c, a connection to a socket the client asked to have
// forwarded (streamlocal-forward@openssh.com at path), back to the client
// on a channel of its own, until both ends are done.
func Reverse(conn *ssh.ServerConn, path string, c *net.UnixConn) {
	ch, reqs, err := conn.OpenChannel("forwarded-streamlocal@openssh.com", ssh.Marshal(&struct {
		SocketPath string
		Reserved0  string
	}{SocketPath: path}))
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	Splice(ch, c)
}

// Signals are the names RFC 4254 gives the signals a client may send to
// a session's command.
var Signals = map[ssh.Signal]syscall.Signal{
	ssh.SIGABRT: syscall.SIGABRT, ssh.SIGALRM: syscall.SIGALRM, ssh.SIGFPE: syscall.SIGFPE,
	ssh.SIGHUP: syscall.SIGHUP, ssh.SIGILL: syscall.SIGILL, ssh.SIGINT: syscall.SIGINT,
	ssh.SIGKILL: syscall.SIGKILL, ssh.SIGPIPE: syscall.SIGPIPE, ssh.SIGQUIT: syscall.SIGQUIT,
	ssh.SIGSEGV: syscall.SIGSEGV, ssh.SIGTERM: syscall.SIGTERM, ssh.SIGUSR1: syscall.SIGUSR1,
	ssh.SIGUSR2: syscall.SIGUSR2,
}

// SignalName is n's RFC 4254 name, for the exit-signal a session sends
// when its command died of n; KILL for one RFC 4254 does not name.
func SignalName(n os.Signal) string {
	for name, sig := range Signals {
		if sig == n {
			return string(name)
		}
	}
	return "KILL"
}
