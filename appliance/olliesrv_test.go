package appliance

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// An admin key runs only what ollie-remote deploys and holds a host with,
// and uploads only where deploy installs.
func TestAdminCommand(t *testing.T) {
	const uploads = "/home/u/.local/share/ollie"
	bin := func() (string, error) { return "/deployed/olliesrv", nil }
	for _, c := range []struct {
		args    []string
		uploads string
		ok      bool
	}{
		{[]string{"start"}, uploads, true},
		{[]string{"restart"}, uploads, true},
		{[]string{"version"}, uploads, true},
		{[]string{"install", "probe"}, uploads, true},
		{[]string{"install", "commit", "x"}, uploads, true},
		{[]string{"install", "backends"}, uploads, true},
		{[]string{"install", "receive", uploads}, uploads, true},
		{[]string{"install", "receive", uploads + "/"}, uploads, true},
		{[]string{"install", "receive", uploads + "/../../.ssh"}, uploads, false},
		{[]string{"install", "receive", "/tmp"}, uploads, false},
		{[]string{"install", "receive"}, uploads, false},
		{[]string{"install", "receive", ".local/share/ollie"}, "", false},
		{[]string{"install", "manifest"}, uploads, false},
		{[]string{"install"}, uploads, false},
		{[]string{"start", "-x"}, uploads, false},
		{[]string{"stop"}, uploads, false},
		{[]string{"serve"}, uploads, false},
		{nil, uploads, false},
	} {
		cmd, err := AdminCommand(c.args, c.uploads, bin)
		if (err == nil) != c.ok {
			t.Errorf("AdminCommand(%q, %q): %v, want allowed %v", c.args, c.uploads, err, c.ok)
			continue
		}
		if c.ok && !slices.Equal(cmd.Args, append([]string{"/deployed/olliesrv"}, c.args...)) {
			t.Errorf("AdminCommand(%q) runs %q", c.args, cmd.Args)
		}
	}
	noBinary := errors.New("no binary")
	if _, err := AdminCommand([]string{"version"}, uploads, func() (string, error) { return "", noBinary }); !errors.Is(err, noBinary) {
		t.Errorf("without a binary: %v", err)
	}
}

// A command's rights come from its key: nothing in its environment names
// a principal or a namespace.
func TestChildEnv(t *testing.T) {
	t.Setenv("OLLIE_UNAME", "root")
	t.Setenv("OLLIE_AGENT_CAP", "x")
	t.Setenv("NAMESPACE", "/elsewhere")
	t.Setenv("KEEP_ME", "1")
	env := childEnv()
	for _, kv := range env {
		for _, bad := range []string{"OLLIE_UNAME=", "OLLIE_AGENT", "NAMESPACE="} {
			if strings.HasPrefix(kv, bad) {
				t.Errorf("childEnv keeps %q", kv)
			}
		}
	}
	if !slices.Contains(env, "KEEP_ME=1") {
		t.Error("childEnv dropped KEEP_ME=1")
	}
}
