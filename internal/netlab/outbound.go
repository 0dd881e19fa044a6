package netlab

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ruleset is the namespace's firewall. Its output chain lets through
// loopback and the packets of connections that are already established
// or related to one (conntrack sees the desktop's SSH session open from
// outside, so the host's replies on it are established; so are its resets
// and ICMP errors to the desktop's attempts). Every other packet is one the
// namespace starts on its link: it is counted, its destination is added to
// a set with a counter of its own, and it is rejected at once: connect
// fails with "no route to host" (EHOSTUNREACH), a UDP send with
// "operation not permitted" (EPERM). Destinations past the link have no
// route, so they never reach this chain; the kernel counts them instead
// (see Outbound).
const ruleset = `
table inet ollie_lab {
	counter refused { }
	set dst4 { type ipv4_addr . inet_proto . inet_service; flags dynamic; counter; size 4096; }
	set dst6 { type ipv6_addr . inet_proto . inet_service; flags dynamic; counter; size 4096; }
	set other4 { type ipv4_addr . inet_proto; flags dynamic; counter; size 4096; }
	set other6 { type ipv6_addr . inet_proto; flags dynamic; counter; size 4096; }
	chain output {
		type filter hook output priority filter; policy accept;
		oif "lo" accept
		ct state established,related accept
		counter name "refused"
		meta l4proto { tcp, udp } update @dst4 { ip daddr . meta l4proto . th dport }
		meta l4proto { tcp, udp } update @dst6 { ip6 daddr . meta l4proto . th dport }
		meta l4proto != { tcp, udp } update @other4 { ip daddr . meta l4proto }
		meta l4proto != { tcp, udp } update @other6 { ip6 daddr . meta l4proto }
		reject with icmpx admin-prohibited
	}
}
`

// Outbound reports what the namespace tried to send anywhere but to
// loopback or on a connection opened to it: attempts is the number of
// packets its firewall refused plus the number of sends that found no
// route (the kernel's IPv4 OutNoRoutes and IPv6 Ip6OutNoRoutes counters,
// which a connect or a datagram to the internet increments before any
// packet exists). A refused connect counts once, a refused datagram once
// per send, a name lookup once per query sent. detail says which
// destinations were refused and how often, and the no-route counts, or
// "none". When the counters cannot be read, attempts is -1 and detail
// says why: a test that wants 0 fails.
func (n *Net) Outbound() (attempts int, detail string) {
	out, err := n.Command(tool("nft"), "-j", "list", "table", "inet", "ollie_lab").Output()
	if err != nil {
		return -1, fmt.Sprintf("netlab: %s: nft list table: %v", n.Name, err)
	}
	refused, dests, err := parseRuleset(out)
	if err != nil {
		return -1, fmt.Sprintf("netlab: %s: %v", n.Name, err)
	}
	snmp, err := n.Command("cat", "/proc/net/snmp", "/proc/net/snmp6").Output()
	if err != nil {
		return -1, fmt.Sprintf("netlab: %s: reading /proc/net/snmp: %v", n.Name, err)
	}
	v4, v6, err := parseNoRoutes(string(snmp))
	if err != nil {
		return -1, fmt.Sprintf("netlab: %s: %v", n.Name, err)
	}
	attempts = refused + v4 + v6
	if attempts == 0 {
		return 0, "none"
	}
	var parts []string
	if refused > 0 {
		parts = append(parts, fmt.Sprintf("refused %d: %s", refused, strings.Join(dests, ", ")))
	}
	if v4+v6 > 0 {
		parts = append(parts, fmt.Sprintf("no route %d (IPv4 %d, IPv6 %d)", v4+v6, v4, v6))
	}
	return attempts, strings.Join(parts, "; ")
}

// parseRuleset reads the refused counter and the destination sets from
// nft -j list table.
func parseRuleset(b []byte) (refused int, dests []string, err error) {
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets int    `json:"packets"`
			} `json:"counter"`
			Set *struct {
				Name string `json:"name"`
				Elem []struct {
					Elem struct {
						Val struct {
							Concat []any `json:"concat"`
						} `json:"val"`
						Counter struct {
							Packets int `json:"packets"`
						} `json:"counter"`
					} `json:"elem"`
				} `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, nil, fmt.Errorf("nft -j: %v", err)
	}
	found := false
	for _, o := range doc.Nftables {
		if c := o.Counter; c != nil && c.Name == "refused" {
			refused, found = c.Packets, true
		}
		if s := o.Set; s != nil {
			for _, e := range s.Elem {
				dests = append(dests, fmt.Sprintf("%s ×%d", dest(e.Elem.Val.Concat), e.Elem.Counter.Packets))
			}
		}
	}
	if !found {
		return 0, nil, fmt.Errorf("nft -j: no counter \"refused\" in table ollie_lab")
	}
	sort.Strings(dests)
	return refused, dests, nil
}

// dest spells a set's key: [addr proto port] as "tcp 10.201.1.1:53",
// [addr proto] as "icmp 10.201.1.1".
func dest(v []any) string {
	s := make([]string, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case float64:
			s[i] = strconv.Itoa(int(x))
		default:
			s[i] = fmt.Sprint(x)
		}
	}
	switch len(s) {
	case 3:
		host := s[0]
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		return s[1] + " " + host + ":" + s[2]
	case 2:
		return s[1] + " " + s[0]
	}
	return strings.Join(s, " ")
}

// parseNoRoutes reads IPv4 OutNoRoutes from /proc/net/snmp (a header line
// of names, then a line of values) and Ip6OutNoRoutes from /proc/net/snmp6
// (a name and a value a line).
func parseNoRoutes(s string) (v4, v6 int, err error) {
	lines := strings.Split(s, "\n")
	got4, got6 := false, false
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "Ip6OutNoRoutes" {
			v6, err = strconv.Atoi(f[1])
			got6 = err == nil
		}
		if len(f) > 1 && f[0] == "Ip:" && i+1 < len(lines) && !got4 {
			vals := strings.Fields(lines[i+1])
			for j, name := range f {
				if name == "OutNoRoutes" && j < len(vals) {
					v4, err = strconv.Atoi(vals[j])
					got4 = err == nil
				}
			}
		}
	}
	if !got4 || !got6 {
		return 0, 0, fmt.Errorf("no OutNoRoutes in /proc/net/snmp or /proc/net/snmp6")
	}
	return v4, v6, nil
}
