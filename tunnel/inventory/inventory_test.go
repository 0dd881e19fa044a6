package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"ollie/internal/lab"
	"ollie/tunnel"
	"ollie/tunnel/inventory"
)

func TestMain(m *testing.M) {
	// The lab test's hosts must be reached with the inventory's key alone.
	os.Unsetenv("SSH_AUTH_SOCK")
	os.Exit(m.Run())
}

// needAnsible ends a test that needs ansible-inventory: a failure in the
// lab tier, where .ci/run installs it, a skip in plain go test.
func needAnsible(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("ansible-inventory")
	lab.Need(t, err == nil, "ansible-inventory (apt-get install ansible-core)")
	return p
}

// backends runs f with the inventory read by ansible-inventory and by
// this package itself.
func backends(t *testing.T, f func(t *testing.T, ansible string)) {
	t.Run("static", func(t *testing.T) { f(t, inventory.NoAnsible) })
	t.Run("ansible-inventory", func(t *testing.T) { f(t, needAnsible(t)) })
}

func resolve(t *testing.T, o inventory.Options, targets ...string) ([]inventory.Host, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hosts, source, err := inventory.Resolve(ctx, targets, o)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", targets, err)
	}
	return hosts, source
}

// fleet is what testdata/ini/hosts.ini and testdata/yaml/hosts.yml say,
// in the order @all lists it: ungrouped, then all's children level by
// level.
var fleet = []inventory.Host{
	{Name: "bastion", Override: &tunnel.Override{HostName: "10.0.0.1", User: "jump"}, Groups: []string{"ungrouped"}},
	{Name: "stage1", Override: &tunnel.Override{HostName: "10.0.1.1", ProxyJump: []string{"bastion"}}, Groups: []string{"staging"}},
	{Name: "web1", Override: &tunnel.Override{HostName: "10.0.0.11", User: "deploy", Port: 2201, IdentityFile: "~/.ssh/web_key"}, Groups: []string{"prod", "web"}},
	{Name: "web2", Override: &tunnel.Override{User: "alice", Port: 2222, IdentityFile: "~/.ssh/web_key", ProxyJump: []string{"bastion"}}, Groups: []string{"prod", "web"}},
	{Name: "web04", Override: &tunnel.Override{User: "deploy", Port: 2222, IdentityFile: "~/.ssh/web_key"}, Groups: []string{"prod", "web"}},
	{Name: "web05", Override: &tunnel.Override{User: "deploy", Port: 2222, IdentityFile: "~/.ssh/web_key"}, Groups: []string{"prod", "web"}},
	{Name: "db1", Override: &tunnel.Override{User: "dba", Port: 2222, ProxyJump: []string{"ops@10.0.0.2:2022"}}, Groups: []string{"db", "prod"}, Vars: dbVars},
	{Name: "db2", Override: &tunnel.Override{User: "dba", Port: 22, ProxyJump: []string{"bastion", "db1"}}, Groups: []string{"db", "prod"}, Vars: dbVars},
}

func pick(names ...string) []inventory.Host {
	var out []inventory.Host
	for _, n := range names {
		for _, h := range fleet {
			if h.Name == n {
				out = append(out, h)
			}
		}
	}
	return out
}

func show(hosts []inventory.Host) string {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "\n  %s %+v %v", h.Name, h.Override, h.Groups)
	}
	return b.String()
}

// dbVars are the ollie_* string vars group_vars/db gives its hosts (its
// ollie_count, a number, is not one).
var dbVars = map[string]string{"ollie_model_via": "desktop:openrouter"}

// TestInventories reads an INI and a YAML inventory of the same fleet
// (groups, children, group and host vars, group_vars/ and host_vars/,
// ranges, ports and jump hosts) both ways: they must agree, host for
// host, with what Ansible means.
func TestInventories(t *testing.T) {
	for _, file := range []string{"testdata/ini/hosts.ini", "testdata/yaml/hosts.yml"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			backends(t, func(t *testing.T, ansible string) {
				o := inventory.Options{Inventory: file, SSHConfig: os.DevNull, AnsibleInventory: ansible}
				cases := []struct {
					targets []string
					want    []inventory.Host
				}{
					{[]string{"@all"}, fleet},
					{[]string{"@prod"}, pick("web1", "web2", "web04", "web05", "db1", "db2")},
					{[]string{"@db", "web1"}, pick("db1", "db2", "web1")},
					{[]string{"web0*,db[12] bastion"}, pick("web04", "web05", "db1", "db2", "bastion")},
					{[]string{"@staging", "stage1", "@staging"}, pick("stage1")},
				}
				if ansible != inventory.NoAnsible {
					// Each run takes most of a second: what follows
					// from the groups and vars read is the same code.
					cases = cases[:2]
				}
				for _, tt := range cases {
					got, source := resolve(t, o, tt.targets...)
					if !reflect.DeepEqual(got, tt.want) {
						t.Errorf("%q:\n got%s\nwant%s", tt.targets, show(got), show(tt.want))
					}
					kind := map[string]string{".ini": "static INI inventory ", ".yml": "static YAML inventory "}[filepath.Ext(file)]
					if ansible != inventory.NoAnsible {
						kind = "ansible-inventory -i "
					}
					if !strings.HasPrefix(source, kind+file) {
						t.Errorf("source %q, want %q…", source, kind+file)
					}
				}
			})
		})
	}
}

func TestSourceNamesAnsibleVersion(t *testing.T) {
	bin := needAnsible(t)
	_, source := resolve(t, inventory.Options{Inventory: "testdata/ini/hosts.ini", SSHConfig: os.DevNull, AnsibleInventory: bin}, "bastion")
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	_, v, _ := strings.Cut(string(out), "[core ")
	v, _, _ = strings.Cut(v, "]")
	if want := "ansible-inventory -i testdata/ini/hosts.ini --list (ansible-core " + v + ")"; v == "" || source != want {
		t.Errorf("source %q, want %q", source, want)
	}
	// Found on PATH when not named.
	if _, source := resolve(t, inventory.Options{Inventory: "testdata/ini/hosts.ini", SSHConfig: os.DevNull}, "bastion"); !strings.HasPrefix(source, "ansible-inventory ") {
		t.Errorf("with ansible-inventory on PATH, source %q", source)
	}
}

const sshConfig = `
Host web3 web9
  HostName 10.0.0.3
Host *.example !bad gw?
  User x
Host=db7
Include %s
Match host x
  User y
`

// TestPatterns: patterns match the literal Host names of the ssh config
// (and the files it includes) and the inventory's hosts; names are kept
// as typed; order is kept and repeats dropped.
func TestPatterns(t *testing.T) {
	dir := t.TempDir()
	inc := filepath.Join(dir, "included")
	os.WriteFile(inc, []byte("Host incl1 web8\n"), 0o644)
	cfg := filepath.Join(dir, "ssh_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf(sshConfig, inc)), 0o644)
	names := func(hs []inventory.Host) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Name)
		}
		return out
	}
	for _, tt := range []struct {
		inv     string
		targets []string
		want    []string
	}{
		{"", []string{"web*"}, []string{"web3", "web9", "web8"}},
		{"", []string{"db?", "incl*"}, []string{"db7", "incl1"}},
		{"", []string{"root@web[!3]", "web9"}, []string{"root@web9", "root@web8", "web9"}},
		{"", []string{"new-host, deploy@other:2222 [::1]:2022", "10.1.2.3"}, []string{"new-host", "deploy@other:2222", "[::1]:2022", "10.1.2.3"}},
		{"testdata/ini/hosts.ini", []string{"web*"}, []string{"web1", "web2", "web04", "web05", "web3", "web9", "web8"}},
		{"testdata/ini/hosts.ini", []string{"web[13]", "web1"}, []string{"web1", "web3"}},
	} {
		o := inventory.Options{Inventory: tt.inv, SSHConfig: cfg, AnsibleInventory: inventory.NoAnsible}
		got, source := resolve(t, o, tt.targets...)
		if !reflect.DeepEqual(names(got), tt.want) {
			t.Errorf("%q with -i %q: got %q, want %q", tt.targets, tt.inv, names(got), tt.want)
		}
		if tt.inv == "" && source != inventory.SourceSSHConfig {
			t.Errorf("source %q without an inventory", source)
		}
	}
	// A name the inventory knows takes its vars even with a user@ before it.
	got, _ := resolve(t, inventory.Options{Inventory: "testdata/ini/hosts.ini", SSHConfig: cfg, AnsibleInventory: inventory.NoAnsible}, "root@web1:22")
	if want := pick("web1")[0]; got[0].Name != "root@web1:22" || !reflect.DeepEqual(got[0].Override, want.Override) {
		t.Errorf("root@web1:22: got %+v", got[0])
	}
}

// TestFileOfNames: @FILE reads names and patterns, one or more a line,
// with # comments; with an inventory, a group of that name comes first.
func TestFileOfNames(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ssh_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf(sshConfig, filepath.Join(dir, "no-such-include"))), 0o644)
	wd, _ := os.Getwd()
	inv := filepath.Join(wd, "testdata/ini/hosts.ini")
	t.Chdir(dir)
	os.WriteFile("hosts.txt", []byte("# the canaries\nweb3\nweb1   # trailing comment\n\n  new-host, other\nweb*\n"), 0o644)
	os.WriteFile("db", []byte("web9\n"), 0o644)
	os.WriteFile("loop", []byte("web3\n@loop\n"), 0o644)

	o := inventory.Options{SSHConfig: cfg}
	got, _ := resolve(t, o, "@hosts.txt")
	var names []string
	for _, h := range got {
		names = append(names, h.Name)
	}
	if want := []string{"web3", "web1", "new-host", "other", "web9"}; !reflect.DeepEqual(names, want) {
		t.Errorf("@hosts.txt: %q, want %q", names, want)
	}
	// With an inventory, @db is its group db, not the file db.
	o = inventory.Options{Inventory: inv, SSHConfig: cfg, AnsibleInventory: inventory.NoAnsible}
	if got, _ := resolve(t, o, "@db"); !reflect.DeepEqual(got, pick("db1", "db2")) {
		t.Errorf("@db with an inventory:%s", show(got))
	}
	// …and a file when the inventory has no such group.
	if got, _ := resolve(t, o, "@hosts.txt"); len(got) != 8 || got[1].Name != "web1" || got[1].Override == nil {
		t.Errorf("@hosts.txt with an inventory:%s", show(got))
	}
	// A relative key is relative to where Resolve ran: the keeper dials
	// from elsewhere.
	os.WriteFile("rel.ini", []byte("k1 ansible_ssh_private_key_file=keys/k1\nk2 ansible_ssh_private_key_file=~/k2\n"), 0o644)
	rel := inventory.Options{Inventory: "rel.ini", SSHConfig: cfg, AnsibleInventory: inventory.NoAnsible}
	if got, _ := resolve(t, rel, "k1", "k2"); got[0].Override.IdentityFile != filepath.Join(dir, "keys/k1") || got[1].Override.IdentityFile != "~/k2" {
		t.Errorf("relative keys: %q, %q", got[0].Override.IdentityFile, got[1].Override.IdentityFile)
	}
	if _, _, err := inventory.Resolve(context.Background(), []string{"@loop"}, o); err == nil || !strings.Contains(err.Error(), "includes itself") {
		t.Errorf("a file naming itself: %v", err)
	}
}

// TestErrors: each way of naming no host is an error that names it.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ssh_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf(sshConfig, filepath.Join(dir, "no-such-include"))), 0o644)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	ini := "testdata/ini/hosts.ini"
	for _, tt := range []struct {
		inv     string
		targets []string
		is      error
		says    []string
	}{
		{ini, []string{"web1", "zz*"}, inventory.ErrNoMatch, []string{"zz*", "matches none", ini, cfg}},
		{"", []string{"zz*"}, inventory.ErrNoMatch, []string{"zz*", cfg}},
		{ini, []string{"@empty"}, inventory.ErrEmptyGroup, []string{"@empty", "group empty", "no hosts"}},
		{ini, []string{"@nosuch"}, inventory.ErrUnknownGroup, []string{"@nosuch", "no group nosuch", "no file nosuch"}},
		{"", []string{"@nosuch"}, inventory.ErrUnknownGroup, []string{"@nosuch", "no file nosuch"}},
		{"", []string{" , "}, inventory.ErrNoTargets, []string{"no hosts given"}},
		{"", []string{"web[1"}, nil, []string{"web[1", "pattern"}},
		{"", []string{"-oProxyCommand=x"}, nil, []string{"-oProxyCommand=x", "not a host name"}},
		{write("bad.ini", "[web]\nweb1\nweb2 port\n"), []string{"web1"}, nil, []string{"bad.ini:3:", "port"}},
		{write("badsect.ini", "[web]\nweb1\n[web:kids]\n"), []string{"web1"}, nil, []string{"badsect.ini:3:", "unknown type"}},
		{write("undeclared.ini", "[web]\nweb1\n[prod:children]\nweb\ndb\n"), []string{"web1"}, nil, []string{"undeclared.ini:5:", "db", "never declared"}},
		{write("varsonly.ini", "[web]\nweb1\n[db:vars]\nx=1\n"), []string{"web1"}, nil, []string{"varsonly.ini:3:", "db:vars"}},
		{write("loop.yml", "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n"), []string{"@a"}, nil, []string{"loop.yml:5:", "loop"}},
		{write("bad.yml", "all:\n  hosts: [a, b]\n"), []string{"a"}, nil, []string{"bad.yml:2:", "mapping"}},
		{write("plugin.yml", "plugin: amazon.aws.aws_ec2\n"), []string{"a"}, nil, []string{"plugin.yml", "aws_ec2", "ansible-inventory"}},
		{write("vars.ini", "[web]\nw1 ansible_port=http\nw2 ansible_host='{{ lookup(x) }}'\nw3 ansible_ssh_common_args='-o ProxyCommand=\"nc %h %p\"'\nw4 ansible_connection=local\nw5 ansible_ssh_common_args='-J'\n"),
			[]string{"w1"}, nil, []string{"host w1", "ansible_port", "http"}},
		{filepath.Join(dir, "vars.ini"), []string{"w2"}, nil, []string{"host w2", "ansible_host", "Jinja"}},
		{filepath.Join(dir, "vars.ini"), []string{"w3"}, nil, []string{"host w3", "ansible_ssh_common_args", "ProxyCommand"}},
		{filepath.Join(dir, "vars.ini"), []string{"w4"}, nil, []string{"host w4", "ansible_connection", "local"}},
		{filepath.Join(dir, "vars.ini"), []string{"w5"}, nil, []string{"host w5", "-J needs a value"}},
		{filepath.Join(dir, "missing.ini"), []string{"a"}, nil, []string{"missing.ini", "no such file"}},
	} {
		o := inventory.Options{Inventory: tt.inv, SSHConfig: cfg, AnsibleInventory: inventory.NoAnsible}
		_, _, err := inventory.Resolve(context.Background(), tt.targets, o)
		if err == nil {
			t.Errorf("%q with -i %q: no error", tt.targets, tt.inv)
			continue
		}
		t.Log(err)
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%q: %v is not %v", tt.targets, err, tt.is)
		}
		for _, s := range tt.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q: %q does not say %q", tt.targets, err, s)
			}
		}
	}
}

// TestDirectory: an inventory directory is its files as Ansible picks
// them (hosts is INI, more.yaml YAML, sub/ read too, ignored.ini and
// README.md skipped), with group_vars/web/ a directory of var files.
func TestDirectory(t *testing.T) {
	backends(t, func(t *testing.T, ansible string) {
		got, source := resolve(t, inventory.Options{Inventory: "testdata/dir", SSHConfig: os.DevNull, AnsibleInventory: ansible}, "@all")
		want := []inventory.Host{
			{Name: "db1", Groups: []string{"db"}},
			{Name: "web1", Override: &tunnel.Override{User: "a", Port: 2300}, Groups: []string{"web"}},
			{Name: "web2", Override: &tunnel.Override{User: "a", Port: 2200}, Groups: []string{"web"}},
			{Name: "s1", Groups: []string{"sub"}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("@all:\n got%s\nwant%s", show(got), show(want))
		}
		if ansible == inventory.NoAnsible && source != "static inventory directory testdata/dir" {
			t.Errorf("source %q", source)
		}
	})
}

// TestHostileNames: a name from an inventory that is no host name (a
// dynamic inventory takes names from a cloud's tags) is refused, and
// what the errors print is terminal-safe.
func TestHostileNames(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "hosts.yml")
	os.WriteFile(inv, []byte("all:\n  hosts:\n    \"-oProxyCommand=x\":\n    \"a\\u001b]0;pwned\\u0007\":\n    ok1:\n      ansible_host: \"x\\u001b[2J\"\n"), 0o644)
	o := inventory.Options{Inventory: inv, SSHConfig: os.DevNull, AnsibleInventory: inventory.NoAnsible}
	for target, says := range map[string]string{
		"@all":              "\"-oProxyCommand=x\": not a host name",
		"a*":                "matches none",
		"a\x1b]0;pwned\x07": "not a host name",
		"ok1":               "ansible_host",
	} {
		_, _, err := inventory.Resolve(context.Background(), []string{target}, o)
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error saying %q", target, err, says)
			continue
		}
		t.Log(err)
		if strings.ContainsAny(err.Error(), "\x1b\x07") {
			t.Errorf("%q: error %q holds control characters", target, err)
		}
	}
}

// TestAnsibleFails: an inventory ansible-inventory cannot parse is an
// error with what it said (file and line), not an empty inventory.
func TestAnsibleFails(t *testing.T) {
	bin := needAnsible(t)
	bad := filepath.Join(t.TempDir(), "bad.ini")
	os.WriteFile(bad, []byte("[web]\nweb1\nweb2 port\n"), 0o644)
	_, _, err := inventory.Resolve(context.Background(), []string{"web1"}, inventory.Options{Inventory: bad, SSHConfig: os.DevNull, AnsibleInventory: bin})
	var ae *inventory.AnsibleError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), bad+":3:") {
		t.Fatalf("got %v, want an AnsibleError naming %s:3", err, bad)
	}
	t.Log(err)
}

// fakeAnsible writes an ansible-inventory that runs script.
func fakeAnsible(t *testing.T, script string) string {
	p := filepath.Join(t.TempDir(), "ansible-inventory")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAnsibleOutput: what a dynamic inventory lists through
// ansible-inventory: hosts without vars are left out of _meta, an empty
// group only appears as a child; its failures are told terminal-safe.
func TestAnsibleOutput(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "aws_ec2.yml")
	os.WriteFile(inv, []byte("plugin: amazon.aws.aws_ec2\n"), 0o644)
	list := `{"_meta": {"hostvars": {"i-1": {"ansible_host": "10.1.0.1", "ansible_port": 2022}}},
 "all": {"children": ["ungrouped", "aws_ec2"]},
 "aws_ec2": {"hosts": ["i-1", "i-2"], "children": ["tag_none"]}}`
	bin := fakeAnsible(t, `case "$1" in --version) echo "ansible-inventory [core 9.9.9]";; *) cat <<'END'
`+list+`
END
esac
`)
	o := inventory.Options{Inventory: inv, SSHConfig: os.DevNull, AnsibleInventory: bin}
	got, source := resolve(t, o, "@aws_ec2")
	want := []inventory.Host{
		{Name: "i-1", Override: &tunnel.Override{HostName: "10.1.0.1", Port: 2022}, Groups: []string{"aws_ec2"}},
		{Name: "i-2", Groups: []string{"aws_ec2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("@aws_ec2:\n got%s\nwant%s", show(got), show(want))
	}
	if want := "ansible-inventory -i " + inv + " --list (ansible-core 9.9.9)"; source != want {
		t.Errorf("source %q, want %q", source, want)
	}
	if _, _, err := inventory.Resolve(context.Background(), []string{"@tag_none"}, o); !errors.Is(err, inventory.ErrEmptyGroup) {
		t.Errorf("@tag_none: %v, want ErrEmptyGroup", err)
	}

	o.AnsibleInventory = fakeAnsible(t, "printf 'ERROR! \\033]0;pwned\\007 no credentials\\n' >&2; exit 1\n")
	_, _, err := inventory.Resolve(context.Background(), []string{"@all"}, o)
	var ae *inventory.AnsibleError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "no credentials") || strings.ContainsAny(err.Error(), "\x1b\x07") {
		t.Errorf("a failing ansible-inventory: %q, want an AnsibleError, terminal-safe, with its stderr", err)
	}
	o.AnsibleInventory = fakeAnsible(t, "echo '{\"all\": '\n")
	if _, _, err := inventory.Resolve(context.Background(), []string{"@all"}, o); !errors.As(err, &ae) {
		t.Errorf("ansible-inventory printing no JSON: %v", err)
	}
}
