package inventory

import (
	"reflect"
	"strings"
	"testing"
)

func TestJumpHosts(t *testing.T) {
	for _, tt := range []struct {
		args string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"-o StrictHostKeyChecking=no -o ServerAliveInterval=5", nil, ""},
		{"-J bastion", []string{"bastion"}, ""},
		{"-Jbastion", []string{"bastion"}, ""},
		{"-J=ops@bastion:2222", []string{"ops@bastion:2222"}, ""},
		{"-J a,b", []string{"a", "b"}, ""},
		{"-o ProxyJump=a", []string{"a"}, ""},
		{"-oProxyJump=a", []string{"a"}, ""},
		{"-o proxyjump=ssh://a:22", []string{"a:22"}, ""},
		{"-o 'ProxyJump a,b'", []string{"a", "b"}, ""},
		{"-o 'ProxyJump = a'", []string{"a"}, ""},
		{"-o ProxyJump a", []string{"a"}, ""},
		{"-o ProxyJump=none", []string{"none"}, ""},
		{"-o ProxyJump=first -J second", []string{"first"}, ""},
		{"-o ProxyCommand='ssh -W %h:%p gw'", nil, "ProxyCommand"},
		{"-J", nil, "needs a value"},
		{"-J 'a b'", nil, "jump host"},
		{"-J a,,b", nil, "jump host"},
		{"-J '-oProxyCommand=x'", nil, "jump host"},
		{"-o 'ProxyJump a", nil, "closing quotation"},
	} {
		got, err := jumpHosts(tt.args)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("jumpHosts(%q): %v, want an error with %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("jumpHosts(%q) = %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
}

func TestExpandHostPattern(t *testing.T) {
	for _, tt := range []struct {
		in    string
		hosts []string
		port  int
		err   string
	}{
		{"web1", []string{"web1"}, 0, ""},
		{"web1:2222", []string{"web1"}, 2222, ""},
		{"10.0.0.1:22", []string{"10.0.0.1"}, 22, ""},
		{"fe80::1", []string{"fe80::1"}, 0, ""},
		{"[fe80::1]:2200", []string{"fe80::1"}, 2200, ""},
		{"web[01:03]", []string{"web01", "web02", "web03"}, 0, ""},
		{"web[1:3]:22", []string{"web1", "web2", "web3"}, 22, ""},
		{"db[a:c].x", []string{"dba.x", "dbb.x", "dbc.x"}, 0, ""},
		{"x[1:9:4]", []string{"x1", "x5", "x9"}, 0, ""},
		{"n[1:2]-[a:b]", []string{"n1-a", "n1-b", "n2-a", "n2-b"}, 0, ""},
		{"n[:1]", []string{"n0", "n1"}, 0, ""},
		{"web1:", nil, 0, "end in ':'"},
		{"web1:0", nil, 0, "bad port"},
		{"web[1:3", nil, 0, "no closing"},
		{"web[1]", nil, 0, "begin:end"},
		{"web[01:100]", nil, 0, "as wide"},
		{"web[c:a]", nil, 0, "ends before"},
		{"web[0:999999]", nil, 0, "more than"},
	} {
		hosts, port, err := expandHostPattern(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("expandHostPattern(%q): %v, want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(hosts, tt.hosts) || port != tt.port {
			t.Errorf("expandHostPattern(%q) = %q %d %v; want %q %d", tt.in, hosts, port, err, tt.hosts, tt.port)
		}
	}
}

func TestSplitWords(t *testing.T) {
	for _, tt := range []struct {
		in       string
		comments bool
		want     []string
	}{
		{`a b  c`, false, []string{"a", "b", "c"}},
		{`a='x y' b="p \"q\" \\ r" c\ d ''`, false, []string{"a=x y", `b=p "q" \ r`, "c d", ""}},
		{`web1 x=1 # note`, true, []string{"web1", "x=1"}},
		{`web1 x=1#note`, true, []string{"web1", "x=1"}},
		{`web1 x='#1'`, true, []string{"web1", "x=#1"}},
		{`-o a#b`, false, []string{"-o", "a#b"}},
	} {
		got, err := splitWords(tt.in, tt.comments)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitWords(%q, %v) = %q, %v; want %q", tt.in, tt.comments, got, err, tt.want)
		}
	}
}

// INI values are Python literals to Ansible: ports are numbers, quoted
// strings lose their quotes.
func TestPythonValue(t *testing.T) {
	for in, want := range map[string]any{
		"22": 22, "+7": 7, "-3": -3, "1.5": 1.5, "True": true, "None": nil,
		"'-J bastion'": "-J bastion", `"a\"b"`: `a"b`, "'a'b'": "'a'b'",
		"10.0.0.1": "10.0.0.1", "~/.ssh/k": "~/.ssh/k", "": "",
	} {
		if got := pythonValue(in); !reflect.DeepEqual(got, want) {
			t.Errorf("pythonValue(%q) = %#v, want %#v", in, got, want)
		}
	}
}
