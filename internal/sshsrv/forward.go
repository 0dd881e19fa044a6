// Package sshsrv is what ollie's SSH servers (the appliance listener,
// package appliance; make demo's hosts, internal/demohost; the
// benchmark's simulated hosts, internal/simhost) share of SSH's own
// protocol: a session's command run as sshd runs it
// (its process group, its signals, its end reported as exit-status or
// exit-signal, what it left running ended when the channel closes),
// stream-local forwards both ways, the signal names of RFC 4254, and a
// server on a loopback port for the hosts that run inside a process. Each
// server keeps its own policy (which commands, which paths, which
// requests); this package keeps the protocol.
package sshsrv

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
)

// DirectPath is the socket a direct-streamlocal@openssh.com channel asks
// to reach, as the client sent it.
func DirectPath(nc ssh.NewChannel) (string, error) {
	var msg struct {
		SocketPath string
		Reserved0  string
		Reserved1  uint32
	}
	err := ssh.Unmarshal(nc.ExtraData(), &msg)
	return msg.SocketPath, err
}

// Accept takes the channel nc and carries it to c, the connection to the
// socket it asked for, until both ends are done.
func Accept(nc ssh.NewChannel, c net.Conn) {
	ch, reqs, err := nc.Accept()
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	Splice(ch, c.(*net.UnixConn))
}

// ForwardRequest is what a streamlocal-forward@openssh.com request, or
// its cancel, asks for: the socket path as the client sent it, and the
// connection it came on.
func ForwardRequest(ctx gliderssh.Context, req *ssh.Request) (path string, conn *ssh.ServerConn, ok bool) {
	var msg struct{ SocketPath string }
	if ssh.Unmarshal(req.Payload, &msg) != nil {
		return "", nil, false
	}
	conn, ok = ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
	return msg.SocketPath, conn, ok
}

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

// Hold keeps ln as conn's forward of path until conn ends or the client
// cancels it, handing carry each connection accepted on it. It is false,
// and ln closed, when conn forwards path already.
func (f *Forwards) Hold(ctx context.Context, conn *ssh.ServerConn, path string, ln net.Listener, carry func(*net.UnixConn)) bool {
	if !f.Add(conn, path, ln) {
		ln.Close()
		return false
	}
	go func() {
		<-ctx.Done()
		f.Remove(conn, "")
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go carry(c.(*net.UnixConn))
		}
	}()
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
