// Package ansible is the host side of the ollie.fleet Ansible collection
// (contrib/ansible/ollie/fleet): the ollie_goal and ollie_info modules,
// run by the deployed olliesrv as "olliesrv ansible goal|info ARGSFILE".
//
// Ansible runs a non-Python module with one argument, the path of a file
// holding the task's arguments as one JSON object (Ansible's internal
// _ansible_* keys among them), and reads one JSON object from its
// standard output. That file is on disk, so the become password is never
// in it: ollie_goal's action plugin writes the password to the module's
// standard input instead (ReadPassword). The module answers approval
// requests itself while its goal runs, by the play's policy: nobody sits
// at a desktop.
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
	// PasswordStdin says the become password follows on standard input:
	// the collection's action plugin (plugins/action/ollie_goal.py) sets
	// it and writes the password there, never into the arguments file.
	PasswordStdin Bool `json:"_ollie_password_stdin"`
	// BecomePassword is the sudo password, kept out of Go strings so
	// that it can be zeroed once handed on. ParseGoalArgs never sets it:
	// it comes from ReadPassword.
	BecomePassword []byte `json:"-"`
	// PasswordInFile reports that the arguments file held a
	// become_password: Ansible wrote it to disk, so the module ignores it
	// and scrubs the file (ScrubArgsFile).
	PasswordInFile bool `json:"-"`
}

// InfoArgs are ollie_info's arguments (none but Ansible's own).
type InfoArgs struct {
	CheckMode bool `json:"_ansible_check_mode"`
}

// maxPassword bounds the become password read from standard input.
const maxPassword = 4096

// ReadArgsFile reads Ansible's arguments file. It holds no secret: the
// become password comes on standard input (ReadPassword), so the file is
// left for Ansible to remove, or to keep with ANSIBLE_KEEP_REMOTE_FILES.
func ReadArgsFile(path string) ([]byte, error) {
	f, err := os.Open(path)
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
	return b, nil
}

// ScrubArgsFile overwrites the arguments file with zeros and removes it:
// for a file that held a become_password anyway (the module run without
// the collection's action plugin), so that it stays on disk no longer
// than the module takes to start.
func ScrubArgsFile(path string) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return
	}
	if fi, err := f.Stat(); err == nil {
		f.WriteAt(make([]byte, fi.Size()), 0)
		f.Sync()
	}
	f.Close()
	os.Remove(path)
}

// ReadPassword reads the become password from r (the module's standard
// input, written by the action plugin) up to EOF, at most maxPassword
// bytes, into one buffer that the caller zeroes: no copies are left
// behind by a growing buffer.
func ReadPassword(r io.Reader) ([]byte, error) {
	buf := make([]byte, maxPassword+1)
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			clear(buf)
			return nil, fmt.Errorf("ansible: become password on standard input: %w", err)
		}
	}
	if n > maxPassword {
		clear(buf)
		return nil, fmt.Errorf("ansible: become password on standard input: over %d bytes", maxPassword)
	}
	return buf[:n:n], nil
}

// ParseGoalArgs reads ollie_goal's arguments. A become_password in them
// is zeroed and ignored (PasswordInFile): Ansible wrote it to disk, on
// the host and the controller, which the password rules forbid; the
// password is taken only from standard input (ReadPassword).
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
		clear(raw.Password)
		a.PasswordInFile = true
	}
	if a.Goal == "" {
		return a, errors.New("ansible: goal is required")
	}
	return a, nil
}
