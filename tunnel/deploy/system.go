package deploy

// deploy -system: the ollie command for every user of a host, in
// /usr/local/bin, which sshd's PATH holds whatever the login shell reads.
// It is a wrapper that runs the caller's own ~/.local/bin/ollie, so that
// each user who deploys gets their own ollie from it and no user's
// install is ever another's: a file there that is not ollie-remote's is
// left as it is, and deploy says so.
//
// Root comes from sudo on the host, approved on the desktop: the desktop's
// broker (its policy file, the terminal broker, askpass or a dialog)
// answers a request for the tool SystemTool and gives the sudo password,
// which goes to sudo -S on the SSH session's standard input only, never
// into argv, the environment, a file or a log, and is zeroed once sent.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"ollie/broker"
	"ollie/internal/termsafe"
	"ollie/tunnel"
)

// SystemCommand is where -system installs the ollie command.
const SystemCommand = "/usr/local/bin/ollie"

// SystemTool is the tool name of the approval -system asks for: a name no
// tool of a host can have (tools' names have no "-"), for policy rules.
const SystemTool = "install-system-ollie"

// systemMark is in the wrapper, and only there: it tells a wrapper of
// ours, of any version, from another program of that name.
const systemMark = ollieMark + " -system"

// systemWrapper is the command every user runs as ollie.
const systemWrapper = `#!/bin/sh
` + systemMark + `: every user's ollie.
# It runs the caller's own, which ollie-remote deploy puts in ~/.local/bin.
if [ -x "$HOME/.local/bin/ollie" ]; then exec "$HOME/.local/bin/ollie" "$@"; fi
echo "ollie: not deployed for $(id -un) on this host: run ollie-remote deploy for this user from your desktop" >&2
exit 127
`

// systemProbe says what SystemCommand ($1) is: none, a symlink and its
// target, or a file with its ls -l line and then (at most 64 KiB of) its
// content.
const systemProbe = `f=$1
if [ -L "$f" ]; then printf 'symlink %s\n' "$(readlink "$f")"; exit 0; fi
if [ ! -e "$f" ]; then echo none; exit 0; fi
printf 'file %s\n' "$(ls -ld "$f")"
head -c 65536 "$f"`

// systemInstall runs as root: it writes the wrapper ($2) as $1 by a
// rename, unless $1 is there and not ollie-remote's.
const systemInstall = `f=$1
if [ -L "$f" ] || { [ -e "$f" ] && ! grep -q '` + systemMark + `' "$f"; }; then
  echo "$f is not ollie-remote's: left as it is" >&2; exit 3
fi
mkdir -p "$(dirname "$f")" || exit 1
t=$(mktemp "$(dirname "$f")/.ollie.XXXXXX") || exit 1
if printf '%s' "$2" > "$t" && chmod 755 "$t" && mv -f "$t" "$f"; then echo installed; exit 0; fi
rm -f "$t"; exit 1`

// systemSudo runs systemInstall with sudo: -n when $3 is "n" (no
// password, for a NOPASSWD host or a cached one), else -S with the
// password on standard input and no prompt. C messages, which are read.
const systemSudo = `LC_ALL=C; export LC_ALL
if ! command -v sudo >/dev/null 2>&1; then echo "sudo is not installed on this host" >&2; exit 97; fi
if [ "$3" = n ]; then exec sudo -n -- /bin/sh -c "$4" ollie-install "$1" "$2"; fi
exec sudo -S -k -p '' -- /bin/sh -c "$4" ollie-install "$1" "$2"`

// testHookSudoLine, when set, is given the password line InstallSystem
// sent to sudo. The line is InstallSystem's own copy, which nothing else
// can reach: the tests keep it to see that it is zeroed.
var testHookSudoLine func(line []byte)

// InstallSystem installs SystemCommand on the host c reaches, as approve
// approves. It returns what it changed, and otherwise why the command was
// not installed, with what to do: a denial, a wrong password, a file of
// another program in the way. Nothing it does fails the deploy.
func InstallSystem(ctx context.Context, c *tunnel.Client, host string, approve broker.Approver, dl Deadlines, progress func(string)) (changed []string, problem string) {
	if progress == nil {
		progress = func(string) {}
	}
	h := termsafe.Field(sshHint(host), maxShellField)
	not := func(why string) string {
		return fmt.Sprintf("%s was not installed: %s; ssh %s .local/bin/ollie works", SystemCommand, why, h)
	}
	pctx, cancel := Within(ctx, dl.ForStep())
	out, err := c.RunLimit(pctx, Sh(systemProbe, SystemCommand), nil, 80<<10)
	cancel()
	if err != nil {
		return nil, not(RemoteError("looking at it", err).Error())
	}
	switch state, detail := parseSystemProbe(out); state {
	case "same":
		return nil, ""
	case "other":
		return nil, not(fmt.Sprintf("it is there and is not ollie-remote's (%s); remove it and deploy -system again to put ollie's there", termsafe.Field(detail, maxShellField)))
	}

	progress("asking the desktop to approve installing " + SystemCommand + " with sudo")
	args, _ := json.Marshal(map[string]string{"installs": SystemCommand, "runs": "each user's own ~/.local/bin/ollie"})
	req := &broker.Request{Host: host, Session: "deploy -system", Agent: "ollie-remote", Tool: SystemTool, Variant: -1,
		Executable: "/bin/sh", Args: args, Cwd: "/", Sudo: true}
	grant, err := approve.Approve(ctx, req)
	var denied *broker.DeniedError
	switch {
	case errors.As(err, &denied):
		reason := denied.Reason
		if reason == "" {
			reason = "denied"
		}
		return nil, not("not approved: " + reason)
	case err != nil:
		return nil, not(fmt.Sprintf("the approval could not be asked: %v", err))
	}
	defer grant.Close("ended")

	run := func(mode string, stdin []byte) (bool, string, error) {
		sctx, cancel := Within(ctx, 2*dl.ForStep())
		defer cancel()
		out, err := c.RunLimit(sctx, Sh(systemSudo, SystemCommand, systemWrapper, mode, systemInstall), bytes.NewReader(stdin), MaxSmallReply)
		if err == nil && strings.Contains(string(out), "installed") {
			return true, "", nil
		}
		var ee *tunnel.ExitError
		if errors.As(err, &ee) {
			return false, string(ee.Stderr), nil
		}
		if err == nil {
			err = fmt.Errorf("sudo ran, and the install said %q", termsafe.Field(string(out), maxShellField))
		}
		return false, "", RemoteError("running sudo", err)
	}
	done := []string{"installed " + SystemCommand + " for every user (it runs each one's ~/.local/bin/ollie)"}
	ok, stderr, err := run("n", nil)
	switch {
	case err != nil:
		return nil, not(err.Error())
	case ok:
		return done, ""
	case !strings.Contains(stderr, "password is required"):
		return nil, not(sudoRefusal(stderr))
	}
	why := ""
	for attempt := 1; attempt <= broker.MaxPasswordAttempts; attempt++ {
		pw, err := grant.Password(ctx, attempt, why)
		if err != nil {
			return nil, not("no sudo password: " + err.Error())
		}
		// The password and its newline, in one slice that is zeroed
		// once the session has sent it.
		line := make([]byte, len(pw)+1)
		copy(line, pw)
		line[len(pw)] = '\n'
		broker.Zero(pw)
		ok, stderr, err := run("S", line)
		if testHookSudoLine != nil {
			testHookSudoLine(line)
		}
		broker.Zero(line)
		switch {
		case err != nil:
			return nil, not(err.Error())
		case ok:
			return done, ""
		case strings.Contains(stderr, "incorrect password") || strings.Contains(stderr, "Sorry, try again"):
			why = "wrong password"
			continue
		}
		return nil, not(sudoRefusal(stderr))
	}
	return nil, not(fmt.Sprintf("the sudo password was wrong %d times", broker.MaxPasswordAttempts))
}

// parseSystemProbe reads systemProbe's answer: "same" (our wrapper as it
// is now), "ours" (one of another version: replaced), "none", or "other"
// with what is there.
func parseSystemProbe(out []byte) (state, detail string) {
	first, rest, _ := bytes.Cut(out, []byte("\n"))
	kind, what, _ := strings.Cut(string(first), " ")
	switch kind {
	case "none":
		return "none", ""
	case "symlink":
		return "other", "a symlink to " + what
	case "file":
		switch {
		case string(rest) == systemWrapper:
			return "same", ""
		case bytes.Contains(rest, []byte(systemMark)):
			return "ours", ""
		}
		return "other", what
	}
	return "other", "the host's answer made no sense"
}

// sudoRefusal says in a line what sudo's refusal means and what to do.
func sudoRefusal(stderr string) string {
	switch {
	case strings.Contains(stderr, "must have a tty"):
		return "the host's sudoers has requiretty, so sudo refuses without a terminal (visudo: Defaults:USER !requiretty)"
	case strings.Contains(stderr, "may not run sudo"), strings.Contains(stderr, "not in the sudoers file"):
		return "this user is not in the host's sudoers"
	}
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = "sudo failed"
	}
	return "sudo said: " + termsafe.Field(msg, MaxHostMessage)
}
