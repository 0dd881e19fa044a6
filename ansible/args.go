// Package ansible is the host side of the ollie.fleet Ansible collection
// (contrib/ansible/ollie/fleet): the ollie_goal and ollie_info modules,
// run by the deployed olliesrv as "olliesrv ansible goal|info ARGSFILE".
//
// Ansible runs a non-Python module with one argument, the path of a file
// holding the task's arguments as one JSON object (Ansible's internal
// _ansible_* keys among them), and reads one JSON object from its
// standard output. The module answers approval requests itself while its
// goal runs, by the play's policy: nobody sits at a desktop.
//
// What it trusts: the arguments file (Ansible wrote it for this user)
// and the host's daemon. The requests it answers are the daemon's gate's,
// which identified the asking tool from the kernel.
package ansible

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxArgs bounds the arguments file: a goal and a policy.
const maxArgs = 1 << 20

// Policy is the play's word on what may leave the sandbox on this host:
// per-host rules come from host or group variables.
type Policy struct {
	// Allow names the tools that may run outside the sandbox; "*" is
	// every tool. Anything else is denied.
	Allow []string `json:"allow"`
	// Sudo lets an allowed tool run as root, with the become password
	// when sudo asks for one.
	Sudo Bool `json:"sudo"`
}

// Bool is a boolean as a play may give it: templated values reach a
// non-Python module as written, "true" or "False" as well as true.
type Bool bool

// UnmarshalJSON takes true, false, or a string Ansible counts as either.
func (b *Bool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case bool:
		*b = Bool(v)
		return nil
	case nil:
		*b = false
		return nil
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "yes", "on", "1":
			*b = true
			return nil
		case "false", "no", "off", "0", "":
			*b = false
			return nil
		}
	}
	return fmt.Errorf("%s is not a boolean", data)
}

// Int is an integer as a play may give it: 600 or "600".
type Int int

// UnmarshalJSON takes a number or a string holding one.
func (n *Int) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case float64:
		*n = Int(v)
		return nil
	case nil:
		*n = 0
		return nil
	case string:
		i, err := strconv.Atoi(strings.TrimSpace(v))
		if err == nil {
			*n = Int(i)
			return nil
		}
	}
	return fmt.Errorf("%s is not an integer", data)
}

// allows reports whether the policy lets tool leave the sandbox.
func (p Policy) allows(tool string) bool {
	for _, t := range p.Allow {
		if t == tool || t == "*" {
			return true
		}
	}
	return false
}

// GoalArgs are ollie_goal's arguments.
type GoalArgs struct {
	Goal    string `json:"goal"`
	Profile string `json:"profile"`
	Model   string `json:"model"`
	// Timeout is how long the goal may run, in seconds; 0 means 600.
	Timeout Int `json:"timeout"`
	// RunID names the session: one per play run. "" makes a fresh name.
	RunID     string `json:"run_id"`
	Policy    Policy `json:"policy"`
	CheckMode Bool   `json:"_ansible_check_mode"`
	// BecomePassword is the sudo password, kept out of Go strings so
	// that it can be zeroed once handed on.
	BecomePassword []byte `json:"-"`
}

// InfoArgs are ollie_info's arguments (none but Ansible's own).
type InfoArgs struct {
	CheckMode bool `json:"_ansible_check_mode"`
}

// ReadArgsFile reads Ansible's arguments file, then overwrites it with
// zeros and removes it: it may hold the become password, and Ansible
// would leave it until the task ends (or for good, with
// ANSIBLE_KEEP_REMOTE_FILES). The caller zeroes the bytes when done.
func ReadArgsFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("ansible: arguments file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxArgs+1))
	if err != nil {
		return nil, fmt.Errorf("ansible: arguments file %s: %w", path, err)
	}
	if len(b) > maxArgs {
		return nil, fmt.Errorf("ansible: arguments file %s: over %d bytes", path, maxArgs)
	}
	f.WriteAt(make([]byte, len(b)), 0)
	f.Sync()
	os.Remove(path)
	return b, nil
}

// ParseGoalArgs reads ollie_goal's arguments; the become password is
// decoded into bytes of its own, never a string.
func ParseGoalArgs(b []byte) (GoalArgs, error) {
	var a GoalArgs
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("ansible: arguments: %w", err)
	}
	var raw struct {
		Password json.RawMessage `json:"become_password"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return a, fmt.Errorf("ansible: arguments: %w", err)
	}
	if len(raw.Password) > 0 && string(raw.Password) != "null" {
		pw, err := jsonString(raw.Password)
		if err != nil {
			return a, fmt.Errorf("ansible: become_password: %w", err)
		}
		a.BecomePassword = pw
	}
	if a.Goal == "" {
		return a, errors.New("ansible: goal is required")
	}
	return a, nil
}

// jsonString decodes a JSON string literal into new bytes, and zeroes
// the literal: encoding/json would leave the secret in a string.
func jsonString(lit []byte) ([]byte, error) {
	defer clear(lit)
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return nil, errors.New("not a string")
	}
	s := lit[1 : len(lit)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(s) {
			return nil, errors.New("bad escape")
		}
		switch s[i] {
		case '"', '\\', '/':
			out = append(out, s[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, ok := hex4(s[i+1:])
			if !ok {
				return nil, errors.New("bad \\u escape")
			}
			i += n
			if utf16.IsSurrogate(r) && i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if r2, n2, ok := hex4(s[i+3:]); ok {
					r = utf16.DecodeRune(r, r2)
					i += 2 + n2
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, errors.New("bad escape")
		}
	}
	return out, nil
}

func hex4(s []byte) (rune, int, bool) {
	if len(s) < 4 {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(string(s[:4]), 16, 32)
	if err != nil {
		return 0, 0, false
	}
	return rune(v), 4, true
}
