package appliance

import (
	"net"
	"net/netip"
	"testing"
)

// TestDropChance: OpenSSH's MaxStartups rule, integer division and all.
func TestDropChance(t *testing.T) {
	for _, c := range []struct {
		n    int
		m    Startups
		want int
	}{
		{9, DefaultMaxStartups, 0},
		{10, DefaultMaxStartups, 30},
		{11, DefaultMaxStartups, 30}, // 70*1/90 truncates to 0
		{55, DefaultMaxStartups, 65},
		{99, DefaultMaxStartups, 99},
		{100, DefaultMaxStartups, 100},
		{5000, DefaultMaxStartups, 100},
		{3, Startups{Start: 2, Rate: 30, Full: 4}, 65},
		{2, Startups{Start: 2, Rate: 100, Full: 4}, 100},
		{0, Startups{Start: 0, Rate: 0, Full: 10}, 0},
		{5, Startups{Start: 5, Rate: 0, Full: 5}, 100}, // Full == Start: no division
	} {
		if got := dropChance(c.n, c.m); got != c.want {
			t.Errorf("dropChance(%d, %v) = %d, want %d", c.n, c.m, got, c.want)
		}
	}
}

// TestSource: the per-source limit counts an IPv4 address, or an IPv6 /64.
func TestSource(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7/32"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7/32"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.UnixAddr{Name: "@", Net: "unix"}, "invalid Prefix"},
	} {
		got, _ := source(c.addr)
		if got.String() != c.want {
			t.Errorf("source(%v) = %v, want %s", c.addr, got, c.want)
		}
	}
	a, _ := source(&net.TCPAddr{IP: net.ParseIP("2001:db8::1")})
	b, _ := source(&net.TCPAddr{IP: net.ParseIP("2001:db8::ffff:1")})
	if a != b || a == (netip.Prefix{}) {
		t.Errorf("two addresses of one /64: %v and %v", a, b)
	}
}
