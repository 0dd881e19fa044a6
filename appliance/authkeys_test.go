package appliance

import (
	"net"
	"testing"
)

func TestFromAllows(t *testing.T) {
	for _, c := range []struct {
		from string
		addr string
		want bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.2", "127.0.0.1", false},
		{"127.0.0.*", "127.0.0.9", true},
		{"10.0.0.0/8,127.0.0.0/8", "127.1.2.3", true},
		{"10.0.0.0/8", "127.1.2.3", false},
		{"127.0.0.0/8,!127.0.0.5", "127.0.0.5", false},
		{"!127.0.0.5,127.0.0.0/8", "127.0.0.5", false},
		{"!127.0.0.5", "127.0.0.6", false}, // a negation alone allows no one
		{"localhost", "127.0.0.1", false},  // names are not resolved
		{"::1", "::1", true},
		{"fd00::/8", "::1", false},
		{"bad/cidr", "127.0.0.1", false},
	} {
		addr := &net.TCPAddr{IP: net.ParseIP(c.addr), Port: 4444}
		g, err := parseOptions([]string{`from="` + c.from + `"`})
		if err != nil {
			t.Fatal(err)
		}
		if got := fromAllows(g.from, addr); got != c.want {
			t.Errorf("from=%q, %s: %v, want %v", c.from, c.addr, got, c.want)
		}
	}
	if !fromAllows(nil, &net.TCPAddr{IP: net.ParseIP("192.0.2.1")}) {
		t.Error("no from= refuses")
	}
}

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		opts []string
		want grant
		bad  bool
	}{
		{nil, grant{}, false},
		{[]string{"no-pty"}, grant{noPTY: true}, false},
		{[]string{"restrict"}, grant{noPTY: true, noFwd: true}, false},
		{[]string{"restrict", "pty"}, grant{noFwd: true}, false},
		{[]string{"restrict", "port-forwarding"}, grant{noPTY: true}, false},
		{[]string{"no-port-forwarding"}, grant{noFwd: true}, false},
		{[]string{ReadOnlyOption}, grant{readOnly: true, noFwd: true}, false},
		{[]string{ReadOnlyOption, "port-forwarding"}, grant{readOnly: true, noFwd: true}, false},
		{[]string{`command="read status"`}, grant{command: "read status"}, false},
		{[]string{"no-agent-forwarding", "no-X11-forwarding"}, grant{}, false},
		{[]string{`permitopen="host:1"`}, grant{}, true},
		{[]string{"ollie-readonly"}, grant{}, true},
	} {
		g, err := parseOptions(c.opts)
		if (err != nil) != c.bad {
			t.Errorf("%q: err %v, want error %v", c.opts, err, c.bad)
			continue
		}
		if !c.bad && (g.command != c.want.command || g.noPTY != c.want.noPTY || g.noFwd != c.want.noFwd || g.readOnly != c.want.readOnly) {
			t.Errorf("%q: %+v, want %+v", c.opts, g, c.want)
		}
	}
}

func TestForwardPaths(t *testing.T) {
	s := &Server{Namespace: "/tmp/ns.u.0"}
	for _, c := range []struct {
		path          string
		reach, listen bool
	}{
		{"/tmp/ns.u.0/ollie", true, false},
		{"/tmp/ns.u.0/./ollie", true, false},
		{"/tmp/ns.u.0/elevate", false, false},
		{"/tmp/ns.u.0/broker-0a1b2c3d", false, true},
		{"/tmp/ns.u.0/broker-XYZ", false, false},
		{"/tmp/ns.u.0/models.sock", false, true},
		{"/tmp/ns.u.0/sub/broker-00", false, false},
		{"/tmp/ns.u.0/../ns.u.0x/broker-00", false, false},
		{"/tmp/other/ollie", false, false},
		{"ollie", false, false},
		{"broker-00", false, false},
	} {
		if got := s.mayReach(c.path); got != c.reach {
			t.Errorf("mayReach(%q) = %v, want %v", c.path, got, c.reach)
		}
		if got := s.mayListen(c.path); got != c.listen {
			t.Errorf("mayListen(%q) = %v, want %v", c.path, got, c.listen)
		}
	}
}
