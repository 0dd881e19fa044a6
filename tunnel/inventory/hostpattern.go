package inventory

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// expandHostPattern is an inventory's host entry as Ansible reads it: a
// name, an address, [IPv6]:port or name:port, with ranges such as
// web[01:10], db[a:c] or x[1:9:2] expanded.
func expandHostPattern(p string) (hosts []string, port int, err error) {
	host := p
	if strings.HasPrefix(p, "[") {
		if h, ps, e := net.SplitHostPort(p); e == nil && net.ParseIP(h) != nil {
			if port, err = parsePort(ps); err != nil {
				return nil, 0, fmt.Errorf("host %s: %v", p, err)
			}
			return []string{h}, port, nil
		}
	}
	if strings.HasSuffix(p, ":") {
		return nil, 0, fmt.Errorf("host %s: a name may not end in ':', which is for a port", p)
	}
	// One colon outside the ranges' brackets is a port; more are IPv6.
	colon, colons, depth := -1, 0, 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ':':
			if depth == 0 {
				colon, colons = i, colons+1
			}
		}
	}
	if colons == 1 && colon > 0 && allDigits(p[colon+1:]) {
		if port, err = parsePort(p[colon+1:]); err != nil {
			return nil, 0, fmt.Errorf("host %s: %v", p, err)
		}
		host = p[:colon]
	}
	if net.ParseIP(host) != nil || !strings.Contains(host, "[") {
		return []string{host}, port, nil
	}
	hosts, err = expandRange(host)
	if err != nil {
		return nil, 0, fmt.Errorf("host %s: %v", p, err)
	}
	return hosts, port, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return n, nil
}

// letters is the order of an alphabetic range: Python's ascii_letters.
const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// maxRange bounds what one host entry expands to.
const maxRange = 100000

// expandRange expands the first [begin:end(:step)] of s, then the rest.
func expandRange(s string) ([]string, error) {
	i := strings.IndexByte(s, '[')
	if i < 0 {
		return []string{s}, nil
	}
	j := strings.IndexByte(s[i:], ']')
	if j < 0 {
		return nil, fmt.Errorf("range %s has no closing ]", s[i:])
	}
	head, spec, tail := s[:i], s[i+1:i+j], s[i+j+1:]
	b := strings.Split(spec, ":")
	if len(b) != 2 && len(b) != 3 {
		return nil, fmt.Errorf("range [%s] must be begin:end or begin:end:step", spec)
	}
	beg, end, step := b[0], b[1], 1
	if len(b) == 3 {
		n, err := strconv.Atoi(b[2])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("range [%s]: bad step %q", spec, b[2])
		}
		step = n
	}
	if beg == "" {
		beg = "0"
	}
	if end == "" {
		return nil, fmt.Errorf("range [%s] has no end", spec)
	}
	var seq []string
	ib, ie := strings.Index(letters, beg), strings.Index(letters, end)
	if len(beg) == 1 && len(end) == 1 && ib >= 0 && ie >= 0 {
		if ib > ie {
			return nil, fmt.Errorf("range [%s] ends before it begins", spec)
		}
		for k := ib; k <= ie; k += step {
			seq = append(seq, letters[k:k+1])
		}
	} else {
		nb, err1 := strconv.Atoi(beg)
		ne, err2 := strconv.Atoi(end)
		if err1 != nil || err2 != nil || nb < 0 {
			return nil, fmt.Errorf("range [%s] is neither numbers nor letters", spec)
		}
		width := 0
		if len(beg) > 1 && beg[0] == '0' {
			if len(beg) != len(end) {
				return nil, fmt.Errorf("range [%s]: begin and end must be as wide", spec)
			}
			width = len(beg)
		}
		if (ne-nb)/step > maxRange {
			return nil, fmt.Errorf("range [%s] has more than %d hosts", spec, maxRange)
		}
		for k := nb; k <= ne; k += step {
			seq = append(seq, fmt.Sprintf("%0*d", width, k))
		}
	}
	var out []string
	for _, x := range seq {
		rest, err := expandRange(head + x + tail)
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
		if len(out) > maxRange {
			return nil, fmt.Errorf("%s expands to more than %d hosts", s, maxRange)
		}
	}
	return out, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
