package gate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"ollie/broker"
)

// Register adds a socket leading to a desktop broker, or moves it first:
// requests go to the newest registration that answers, and requests parked
// for want of one are handed to it. ollie-remote up registers a fresh
// socket for each SSH connection it holds, so a host reached from two
// desktops (or two keepers) has a registration each.
func (g *Gate) Register(path string) error { return g.RegisterKeyed(path, nil) }

// RegisterKeyed is Register with the key the broker behind path expects
// with every request (a copy is kept; nil: none). ollie-remote's keeper
// gives one: its socket is sshd's, which any process of this user can
// connect to, and the key is how the desktop tells olliesrv from them.
func (g *Gate) RegisterKeyed(path string, key []byte) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("broker socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("broker socket: %s is not a socket", path)
	}
	g.mu.Lock()
	g.brokers = append([]string{path}, slices.DeleteFunc(g.brokers, func(p string) bool { return p == path })...)
	if old := g.keys[path]; old != nil {
		broker.Zero(old)
		delete(g.keys, path)
	}
	if len(key) > 0 {
		if g.keys == nil {
			g.keys = map[string][]byte{}
		}
		g.keys[path] = slices.Clone(key)
	}
	g.joined.Bump()
	g.mu.Unlock()
	g.publish("bypass.broker", "+"+path)
	g.Sweep()
	return nil
}

// Unregister removes a registration (a keeper going down removes its
// own, and no other), and the socket with it when it is one of
// ollie-remote's in Dir. Removing one that is not registered is not an
// error: a daemon started since does not know it.
func (g *Gate) Unregister(path string) {
	g.mu.Lock()
	n := len(g.brokers)
	g.brokers = slices.DeleteFunc(g.brokers, func(p string) bool { return p == path })
	removed := len(g.brokers) < n
	if k := g.keys[path]; k != nil {
		broker.Zero(k)
		delete(g.keys, path)
	}
	g.mu.Unlock()
	g.removeSocket(path)
	if removed {
		g.publish("bypass.broker", "-"+path)
	}
}

// Brokers lists the registrations, newest first.
func (g *Gate) Brokers() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.brokers)
}

// Sweep drops the registrations and removes the broker-* sockets in Dir
// that nobody listens on: their SSH connections are gone. A socket made
// in the last few seconds is left alone, since sshd may not listen on it
// yet.
func (g *Gate) Sweep() {
	if g.Dir == "" {
		return
	}
	live, err := listeningSockets()
	if err != nil {
		return // not Linux, or no /proc: the gate drops a dead one when it cannot reach it
	}
	socks, _ := filepath.Glob(filepath.Join(g.Dir, "broker-*"))
	for _, s := range socks {
		fi, err := os.Lstat(s)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || live[s] || time.Since(fi.ModTime()) < sweepAge {
			continue
		}
		g.Log.Info("broker gate: removing a broker socket nobody listens on", "socket", s)
		g.Unregister(s)
	}
}

// sweepAge is how old a broker socket must be before Sweep may remove it.
const sweepAge = 5 * time.Second

// removeSocket removes path if it is a socket ollie-remote forwarded into
// Dir; the gate removes nothing else.
func (g *Gate) removeSocket(path string) {
	if g.Dir == "" || filepath.Dir(path) != filepath.Clean(g.Dir) || !strings.HasPrefix(filepath.Base(path), "broker-") {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
}

// listeningSockets reads the paths of the Unix sockets listening on this
// host from /proc/net/unix, which, unlike connecting, tells without
// opening a conversation with the desktop at the other end.
func listeningSockets() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	const acceptCon = 0x10000 // __SO_ACCEPTCON: the socket listens
	live := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err == nil && flags&acceptCon != 0 {
			live[f[7]] = true
		}
	}
	return live, nil
}
