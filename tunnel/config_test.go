package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	home, _ := os.UserHomeDir()
	cfg := filepath.Join(dir, "config")
	os.WriteFile(cfg, []byte(`
Host web1
  HostName 10.9.8.7
  User deploy
  Port 2222
  IdentityFile ~/.ssh/web_key
  IdentityFile %d/.ssh/other_%r
  ProxyJump bastion, user2@bastion2:2200
  ConnectTimeout 5
  ServerAliveInterval 7
  ServerAliveCountMax 9
  UserKnownHostsFile ~/kh1 /etc/kh2

Host nojump
  ProxyJump none

Host bad
  Port eighty

Host *.example
  HostName %h.internal
`), 0o644)
	o := Options{ConfigFile: cfg}
	// A host the config names no known_hosts for: the user's, every file
	// the config names for its other hosts, the system's.
	unnamed := []string{filepath.Join(home, ".ssh/known_hosts"), filepath.Join(home, ".ssh/known_hosts2"),
		filepath.Join(home, "kh1"), "/etc/kh2", "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}
	tests := []struct {
		alias string
		want  Target
	}{
		{"web1", Target{
			Alias: "web1", HostName: "10.9.8.7", User: "deploy", Port: 2222,
			IdentityFiles:  []string{filepath.Join(home, ".ssh/web_key"), home + "/.ssh/other_deploy"},
			ProxyJump:      []string{"bastion", "user2@bastion2:2200"},
			ConnectTimeout: 5 * time.Second, AliveInterval: 7 * time.Second, AliveCountMax: 9,
			KnownHosts: []string{filepath.Join(home, "kh1"), "/etc/kh2"},
		}},
		{"root@web1:22", Target{
			Alias: "web1", HostName: "10.9.8.7", User: "root", Port: 22,
			IdentityFiles:  []string{filepath.Join(home, ".ssh/web_key"), home + "/.ssh/other_root"},
			ProxyJump:      []string{"bastion", "user2@bastion2:2200"},
			ConnectTimeout: 5 * time.Second, AliveInterval: 7 * time.Second, AliveCountMax: 9,
			KnownHosts: []string{filepath.Join(home, "kh1"), "/etc/kh2"},
		}},
		{"nojump", Target{
			Alias: "nojump", HostName: "nojump", User: localUser(), Port: 22,
			ConnectTimeout: DefaultConnectTimeout, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: unnamed,
		}},
		{"db.example", Target{
			Alias: "db.example", HostName: "db.example.internal", User: localUser(), Port: 22,
			ConnectTimeout: DefaultConnectTimeout, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: unnamed,
		}},
		{"[::1]:2022", Target{
			Alias: "::1", HostName: "::1", User: localUser(), Port: 2022,
			ConnectTimeout: DefaultConnectTimeout, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: unnamed,
		}},
	}
	for _, tt := range tests {
		got, err := Resolve(tt.alias, o)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.alias, err)
			continue
		}
		if !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("Resolve(%q)\n got %+v\nwant %+v", tt.alias, *got, tt.want)
		}
	}

	got, err := Resolve("web1", Options{ConfigFile: cfg, KnownHosts: []string{"/x/kh"}})
	if err != nil || !reflect.DeepEqual(got.KnownHosts, []string{"/x/kh"}) {
		t.Errorf("Options.KnownHosts not preferred: %v, %v", got, err)
	}
	if _, err := Resolve("bad", o); err == nil || !Permanent(err) {
		t.Errorf("Port eighty: got %v, want a ConfigError", err)
	} else {
		t.Log(err)
	}
	if _, err := Resolve("web1", Options{ConfigFile: filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing -F file was accepted")
	}
}

func TestBackoff(t *testing.T) {
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
}

func TestResolveOverride(t *testing.T) {
	dir := t.TempDir()
	home, _ := os.UserHomeDir()
	cfg := filepath.Join(dir, "config")
	os.WriteFile(cfg, []byte(`
Host web1
  HostName 10.9.8.7
  User deploy
  Port 2222
  IdentityFile ~/.ssh/web_key
  ProxyJump bastion
  ConnectTimeout 5
  UserKnownHostsFile /etc/kh
`), 0o644)
	unnamed := []string{filepath.Join(home, ".ssh/known_hosts"), filepath.Join(home, ".ssh/known_hosts2"),
		"/etc/kh", "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}
	full := &Override{HostName: "10.1.1.1", User: "ops", Port: 2200, IdentityFile: "~/keys/%r", ProxyJump: []string{"j@hop:2022", "hop2"}}
	tests := []struct {
		alias string
		ov    *Override
		want  Target
	}{
		{"web1", full, Target{
			Alias: "web1", HostName: "10.1.1.1", User: "ops", Port: 2200,
			IdentityFiles:  []string{filepath.Join(home, "keys/ops"), filepath.Join(home, ".ssh/web_key")},
			ProxyJump:      []string{"j@hop:2022", "hop2"},
			ConnectTimeout: 5 * time.Second, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: []string{"/etc/kh"},
		}},
		// What the user typed wins over the override.
		{"root@web1:22", full, Target{
			Alias: "web1", HostName: "10.1.1.1", User: "root", Port: 22,
			IdentityFiles:  []string{filepath.Join(home, "keys/root"), filepath.Join(home, ".ssh/web_key")},
			ProxyJump:      []string{"j@hop:2022", "hop2"},
			ConnectTimeout: 5 * time.Second, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: []string{"/etc/kh"},
		}},
		// Zero fields leave the config's values; "none" drops its jump.
		{"web1", &Override{ProxyJump: []string{"none"}}, Target{
			Alias: "web1", HostName: "10.9.8.7", User: "deploy", Port: 2222,
			IdentityFiles:  []string{filepath.Join(home, ".ssh/web_key")},
			ConnectTimeout: 5 * time.Second, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: []string{"/etc/kh"},
		}},
		{"web1", &Override{}, Target{
			Alias: "web1", HostName: "10.9.8.7", User: "deploy", Port: 2222,
			IdentityFiles:  []string{filepath.Join(home, ".ssh/web_key")},
			ProxyJump:      []string{"bastion"},
			ConnectTimeout: 5 * time.Second, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: []string{"/etc/kh"},
		}},
		// A name the config does not know, reached by the override alone.
		{"app7", &Override{HostName: "127.0.0.17", User: "u", Port: 2017, IdentityFile: "/k"}, Target{
			Alias: "app7", HostName: "127.0.0.17", User: "u", Port: 2017,
			IdentityFiles:  []string{"/k"},
			ConnectTimeout: DefaultConnectTimeout, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: unnamed,
		}},
	}
	for _, tt := range tests {
		got, err := Resolve(tt.alias, Options{ConfigFile: cfg, Override: tt.ov})
		if err != nil {
			t.Errorf("Resolve(%q, %+v): %v", tt.alias, tt.ov, err)
			continue
		}
		if !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("Resolve(%q, %+v)\n got %+v\nwant %+v", tt.alias, tt.ov, *got, tt.want)
		}
	}

	for _, ov := range []*Override{
		{Port: 70000},
		{HostName: "-oProxyCommand=x"},
		{HostName: "a b"},
		{User: "a@b"},
		{ProxyJump: []string{"a b"}},
		{ProxyJump: []string{"h:0"}},
		{IdentityFile: "/k\n"},
	} {
		_, err := Resolve("web1", Options{ConfigFile: cfg, Override: ov})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "web1") {
			t.Errorf("override %+v: got %v, want a ConfigError naming web1", ov, err)
		}
	}
}

// The keeper gets an Override over its control socket.
func TestOverrideJSON(t *testing.T) {
	ov := Override{HostName: "h", User: "u", Port: 2, IdentityFile: "/k", ProxyJump: []string{"a", "b@c:3"}}
	b, err := json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"hostname":"h","user":"u","port":2,"identity_file":"/k","proxy_jump":["a","b@c:3"]}`; string(b) != want {
		t.Errorf("json %s, want %s", b, want)
	}
	var back Override
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, ov) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if b, _ := json.Marshal(Override{}); string(b) != "{}" {
		t.Errorf("empty override: %s", b)
	}
}

// A jump host is resolved through the config alone, not the target's
// override: the hop here refuses at once on 127.0.0.1, where the
// override's address would only time out.
func TestOverrideNotForHops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "config")
	os.WriteFile(cfg, []byte(fmt.Sprintf("Host hop1\n  HostName 127.0.0.1\n  Port %d\n  ConnectTimeout 1\n", port)), 0o644)
	o := Options{ConfigFile: cfg, Override: &Override{HostName: "192.0.2.1", Port: 2999, User: "x", ProxyJump: []string{"hop1"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Dial(ctx, "app", o)
	want := fmt.Sprintf("hop1: connect to 127.0.0.1:%d", port)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dial through hop1: %v, want an error with %q", err, want)
	}
}

// A config file is parsed once while it is unchanged, and read again at
// the next resolve once it changes, even to the same size.
func TestResolveSeesAnEditedConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config")
	write := func(addr string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte("Host web1\n  HostName "+addr+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(cfg, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	resolve := func() string {
		t.Helper()
		tg, err := Resolve("web1", Options{ConfigFile: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return tg.HostName
	}
	t0 := time.Now().Add(-time.Hour)
	write("10.0.0.1", t0)
	if got := resolve(); got != "10.0.0.1" {
		t.Fatalf("HostName %q", got)
	}
	if got := resolve(); got != "10.0.0.1" {
		t.Fatalf("again: HostName %q", got)
	}
	write("10.0.0.2", t0.Add(time.Second)) // the same size
	if got := resolve(); got != "10.0.0.2" {
		t.Errorf("after an edit: HostName %q, want 10.0.0.2", got)
	}
}
