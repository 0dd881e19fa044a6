// Package sshfwd is what both of ollie's SSH servers (the appliance
// listener, ns/sshd, and make demo's hosts, internal/demohost) need to
// carry stream-local forwards: copying a channel and a socket both ways,
// and the sockets listened on for each connection.
package sshfwd

import (
	"io"
	"net"
	"sync"

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
