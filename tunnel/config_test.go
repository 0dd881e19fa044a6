package tunnel

import (
	"os"
	"path/filepath"
	"reflect"
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
			KnownHosts: []string{filepath.Join(home, ".ssh/known_hosts")},
		}},
		{"db.example", Target{
			Alias: "db.example", HostName: "db.example.internal", User: localUser(), Port: 22,
			ConnectTimeout: DefaultConnectTimeout, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: []string{filepath.Join(home, ".ssh/known_hosts")},
		}},
		{"[::1]:2022", Target{
			Alias: "::1", HostName: "::1", User: localUser(), Port: 2022,
			ConnectTimeout: DefaultConnectTimeout, AliveInterval: DefaultAliveInterval, AliveCountMax: DefaultAliveCountMax,
			KnownHosts: []string{filepath.Join(home, ".ssh/known_hosts")},
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
