package inventory

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"ollie/internal/termsafe"
	"ollie/tunnel"
)

// VarError is a host var that cannot be used to reach the host.
type VarError struct {
	Host, Var string
	Err       error
}

func (e *VarError) Error() string {
	return termsafe.Line(fmt.Sprintf("inventory: host %s: %s: %v", e.Host, e.Var, e.Err))
}

func (e *VarError) Unwrap() error { return e.Err }

// sshConnections are the ansible_connection values that mean ssh.
var sshConnections = map[string]bool{
	"": true, "ssh": true, "smart": true, "paramiko": true, "paramiko_ssh": true,
	"ansible.builtin.ssh": true, "ansible.builtin.paramiko_ssh": true,
}

// override turns what an inventory says about reaching a host into a
// tunnel.Override: nil when it says nothing. Each setting has Ansible's
// older name as a fallback (ansible_ssh_host for ansible_host, …).
func override(host string, vars map[string]any) (*tunnel.Override, error) {
	var ov tunnel.Override
	str := func(names ...string) (string, error) {
		for _, n := range names {
			v, ok := vars[n]
			if !ok || v == nil {
				continue
			}
			s, err := stringVar(v)
			if err == nil && strings.TrimSpace(s) != s {
				err = fmt.Errorf("%q has spaces around it", s)
			}
			if err == nil {
				err = notTemplate(s)
			}
			if err != nil {
				return "", &VarError{Host: host, Var: n, Err: err}
			}
			return s, nil
		}
		return "", nil
	}
	conn, err := str("ansible_connection")
	if err != nil {
		return nil, err
	}
	if !sshConnections[conn] {
		return nil, &VarError{Host: host, Var: "ansible_connection", Err: fmt.Errorf("%q: only hosts reached over ssh can be used", conn)}
	}
	if ov.HostName, err = str("ansible_host", "ansible_ssh_host"); err != nil {
		return nil, err
	}
	if ov.User, err = str("ansible_user", "ansible_ssh_user", "ansible_remote_user"); err != nil {
		return nil, err
	}
	if ov.IdentityFile, err = str("ansible_ssh_private_key_file", "ansible_private_key_file"); err != nil {
		return nil, err
	}
	// Relative to where the user is, as for ssh -i: the keeper that
	// dials it later runs elsewhere.
	if f := ov.IdentityFile; f != "" && !filepath.IsAbs(f) && f != "~" && !strings.HasPrefix(f, "~/") {
		if ov.IdentityFile, err = filepath.Abs(f); err != nil {
			return nil, &VarError{Host: host, Var: "ansible_ssh_private_key_file", Err: err}
		}
	}
	for _, n := range []string{"ansible_port", "ansible_ssh_port"} {
		v, ok := vars[n]
		if !ok || v == nil {
			continue
		}
		p, err := portVar(v)
		if err != nil {
			return nil, &VarError{Host: host, Var: n, Err: err}
		}
		ov.Port = p
		break
	}
	if ov.HostName != "" && !plainWord(ov.HostName) {
		return nil, &VarError{Host: host, Var: "ansible_host", Err: fmt.Errorf("%q is not a host name or address", ov.HostName)}
	}
	if ov.User != "" && (!plainWord(ov.User) || strings.ContainsAny(ov.User, "@:")) {
		return nil, &VarError{Host: host, Var: "ansible_user", Err: fmt.Errorf("%q is not a user name", ov.User)}
	}
	// ssh takes the first ProxyJump it is given, and Ansible puts the
	// common args before the extra ones.
	for _, n := range []string{"ansible_ssh_common_args", "ansible_ssh_extra_args"} {
		args, err := str(n)
		if err != nil {
			return nil, err
		}
		hops, err := jumpHosts(args)
		if err != nil {
			return nil, &VarError{Host: host, Var: n, Err: err}
		}
		if hops != nil {
			ov.ProxyJump = hops
			break
		}
	}
	if ov.HostName == "" && ov.User == "" && ov.Port == 0 && ov.IdentityFile == "" && ov.ProxyJump == nil {
		return nil, nil
	}
	return &ov, nil
}

// stringVar is a var that is a string, or a number written without quotes.
func stringVar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("a %T, not a string", v)
}

func portVar(v any) (int, error) {
	var n float64
	switch v := v.(type) {
	case int:
		n = float64(v)
	case float64:
		n = v
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return 0, fmt.Errorf("%q is not a port number", v)
		}
		n = f
	case string:
		if err := notTemplate(v); err != nil {
			return 0, err
		}
		i, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%q is not a port number", v)
		}
		n = float64(i)
	default:
		return 0, fmt.Errorf("a %T, not a port number", v)
	}
	if n != math.Trunc(n) || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%v is not a port number (1–65535)", v)
	}
	return int(n), nil
}

// notTemplate refuses a Jinja template: Ansible would evaluate it with
// the host's facts and vars, and its text is no address.
func notTemplate(s string) error {
	if strings.Contains(s, "{{") || strings.Contains(s, "{%") {
		return fmt.Errorf("%q is a Jinja template, which is not evaluated here: give the value itself", s)
	}
	return nil
}

// jumpHosts finds the jump hosts in ssh arguments: -J HOPS (also -JHOPS,
// -J=HOPS), -o ProxyJump=HOPS, -o "ProxyJump HOPS", -o ProxyJump HOPS.
// The first one given wins, as in ssh; nil when there is none. Other
// options are not ssh's concern here and are left alone, except a
// ProxyCommand, which would change how the host is reached.
func jumpHosts(args string) ([]string, error) {
	if strings.TrimSpace(args) == "" {
		return nil, nil
	}
	words, err := splitWords(args, false)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", args, err)
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		next := func() (string, error) {
			if i+1 == len(words) {
				return "", fmt.Errorf("%q: %s needs a value", args, w)
			}
			i++
			return words[i], nil
		}
		switch {
		case w == "-J":
			v, err := next()
			if err != nil {
				return nil, err
			}
			return hopList(args, v)
		case strings.HasPrefix(w, "-J"):
			return hopList(args, strings.TrimPrefix(w[2:], "="))
		case strings.HasPrefix(w, "-o"):
			opt := strings.TrimPrefix(w[2:], "=")
			if opt == "" {
				if opt, err = next(); err != nil {
					return nil, err
				}
			}
			key, val := splitOption(opt)
			switch strings.ToLower(key) {
			case "proxyjump":
				if val == "" {
					if val, err = next(); err != nil {
						return nil, err
					}
				}
				return hopList(args, val)
			case "proxycommand":
				return nil, fmt.Errorf("%q: a ProxyCommand cannot be followed here; give the jump host as -J HOST or -o ProxyJump=HOST", args)
			}
		}
	}
	return nil, nil
}

// splitOption takes "Key=value", "Key value" or "Key = value" apart.
func splitOption(s string) (key, val string) {
	s = strings.TrimSpace(s)
	i := strings.IndexAny(s, "= \t")
	if i < 0 {
		return s, ""
	}
	key, val = s[:i], strings.TrimSpace(s[i:])
	val = strings.TrimSpace(strings.TrimPrefix(val, "="))
	return key, val
}

// hopList is a ProxyJump value's hops, first hop first.
func hopList(args, v string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(v), "none") {
		return []string{"none"}, nil
	}
	var hops []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimPrefix(strings.TrimSpace(h), "ssh://")
		if !plainWord(h) {
			return nil, fmt.Errorf("%q: jump host %q is not [user@]host[:port]", args, h)
		}
		hops = append(hops, h)
	}
	return hops, nil
}

// plainWord is a non-empty value without spaces or control characters,
// not starting with '-' (which ssh would take for an option).
func plainWord(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// ollieVars are a host's ollie_* variables with a string value; nil when
// it has none.
func ollieVars(vars map[string]any) map[string]string {
	var out map[string]string
	for k, v := range vars {
		s, ok := v.(string)
		if !ok || !strings.HasPrefix(k, "ollie_") || notTemplate(s) != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = strings.TrimSpace(s)
	}
	return out
}
