package deploy

// How "ssh HOST ollie" finds the command. sshd runs a command as
// SHELL -c 'COMMAND' with the user's login shell and its own PATH, which
// does not hold ~/.local/bin and reads no ~/.profile; the only per-user
// place to put the directory on PATH is a file that shell reads for a
// command:
//
//	login shell             reads for ssh HOST CMD           deploy puts the PATH line in
//	bash                    ~/.bashrc (when run by sshd)     the top of ~/.bashrc
//	zsh                     ~/.zshenv                        ~/.zshenv
//	fish                    ~/.config/fish/conf.d/*.fish     ~/.config/fish/conf.d/ollie.fish
//	tcsh, csh               ~/.tcshrc, else ~/.cshrc         the top of the one it reads
//	sh, dash, ash, ksh, …   nothing                          nothing: the desktop says what to type
//
// The host half (install.go) makes the edits for the shell the password
// database names; the desktop half (push.go) then asks the login shell
// itself where "ollie" is and says what is wrong when it is not ours.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

// shellKind is a family of login shells, by what it reads for ssh commands.
type shellKind int

const (
	shellUnknown shellKind = iota // no login shell found: bash assumed, as deploy did before
	shellBash
	shellZsh
	shellFish
	shellCsh
	shellNone  // reads no file for sh -c: sh, dash, ash, ksh, mksh, …
	shellOther // a shell deploy does not know
)

// kindOf names the family of a login shell by its name, as sshd runs it
// (argv[0] is the base name): /bin/sh is dash or bash in POSIX mode, and
// either reads nothing for a command.
func kindOf(shell string) shellKind {
	if shell == "" {
		return shellUnknown
	}
	switch strings.TrimPrefix(filepath.Base(shell), "-") {
	case "bash":
		return shellBash
	case "zsh":
		return shellZsh
	case "fish":
		return shellFish
	case "tcsh", "csh":
		return shellCsh
	case "sh", "dash", "ash", "busybox", "ksh", "ksh93", "mksh", "lksh", "pdksh", "oksh", "posh", "yash", "rbash", "rksh", "rksh93":
		// rbash reads ~/.bashrc but refuses to run a command named
		// with a slash, and the ollie script's exec is one.
		return shellNone
	}
	return shellOther
}

// pathMarker starts each block deploy writes; the line after it is the
// block's code. Finding the marker is how a block is replaced, never
// written twice.
const pathMarker = "# added by ollie-remote: ssh HOST ollie"

// The code line of each family: ~/.local/bin first on PATH unless it is
// already there. The sh line is the one deploy has written since the
// start, so that hosts deployed before see no change.
const (
	shPathLine   = `case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) PATH="$HOME/.local/bin:$PATH"; export PATH;; esac`
	cshPathLine  = `if ( ":${PATH}:" !~ *":${HOME}/.local/bin:"* ) setenv PATH "${HOME}/.local/bin:${PATH}"`
	fishPathLine = `contains -- $HOME/.local/bin $PATH; or set -gx PATH $HOME/.local/bin $PATH`
)

// rcEdit is one file that puts ~/.local/bin on PATH for a login shell.
type rcEdit struct {
	name string // the file as messages name it: ~/.bashrc
	path string
	code string // the block's code line
	own  bool   // a file of ollie's own (fish's conf.d): its whole content is the block
}

// rcEdits lists the files to edit for a login shell of kind k: those the
// shell reads for a command, and any other that already holds a block of
// ours (kept up to date rather than left stale).
func rcEdits(home, configDir string, k shellKind) []rcEdit {
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	// fish reads $XDG_CONFIG_HOME/fish, ~/.config/fish without it.
	fish := rcEdit{name: "~/.config/fish/conf.d/ollie.fish", path: filepath.Join(home, ".config/fish/conf.d/ollie.fish"), code: fishPathLine, own: true}
	if configDir != "" && configDir != filepath.Join(home, ".config") {
		fish.path = filepath.Join(configDir, "fish", "conf.d", "ollie.fish")
		fish.name = fish.path
	}
	sh := func(rel string) rcEdit {
		return rcEdit{name: "~/" + rel, path: filepath.Join(home, rel), code: shPathLine}
	}
	csh := func(rel string) rcEdit {
		return rcEdit{name: "~/" + rel, path: filepath.Join(home, rel), code: cshPathLine}
	}

	var out []rcEdit
	switch k {
	case shellUnknown:
		out = append(out, sh(".bashrc"))
		if exists(filepath.Join(home, ".zshenv")) {
			out = append(out, sh(".zshenv"))
		}
	case shellBash:
		out = append(out, sh(".bashrc"))
	case shellZsh:
		out = append(out, sh(".zshenv"))
	case shellFish:
		out = append(out, fish)
	case shellCsh:
		// tcsh reads ~/.tcshrc when there is one, else ~/.cshrc; csh
		// reads ~/.cshrc (and /bin/csh may be either).
		tcshrc := exists(filepath.Join(home, ".tcshrc"))
		if tcshrc {
			out = append(out, csh(".tcshrc"))
		}
		if !tcshrc || exists(filepath.Join(home, ".cshrc")) {
			out = append(out, csh(".cshrc"))
		}
	}
	for _, e := range []rcEdit{sh(".bashrc"), sh(".zshenv"), csh(".tcshrc"), csh(".cshrc"), fish} {
		if hasEdit(out, e.path) {
			continue
		}
		if b, err := os.ReadFile(e.path); err == nil && (e.own || findBlock(b) >= 0) {
			out = append(out, e)
		}
	}
	return out
}

func hasEdit(es []rcEdit, path string) bool {
	for _, e := range es {
		if e.path == path {
			return true
		}
	}
	return false
}

// block is the text deploy keeps in a file: the marker and the code.
func block(code string) string { return pathMarker + "\n" + code + "\n" }

// findBlock is where the marker line starts in content, or -1.
func findBlock(content []byte) int {
	for i := 0; i < len(content); {
		end := bytes.IndexByte(content[i:], '\n')
		line := content[i:]
		if end >= 0 {
			line = content[i : i+end]
		}
		if string(bytes.TrimRight(line, "\r")) == pathMarker {
			return i
		}
		if end < 0 {
			break
		}
		i += end + 1
	}
	return -1
}

// withBlock returns content with the block of code in place: the marker's
// block replaced when there is one (the marker line and the line after
// it), else put first, where no early return of the file can skip it.
// changed is false when content already holds exactly that block.
func withBlock(content []byte, code string) (out []byte, changed bool) {
	want := block(code)
	at := findBlock(content)
	if at < 0 {
		return append([]byte(want), content...), true
	}
	end := at
	for n := 0; n < 2 && end < len(content); n++ { // the marker line and the code line
		if i := bytes.IndexByte(content[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(content)
		}
	}
	if string(content[at:end]) == want {
		return content, false
	}
	out = append(append(append([]byte(nil), content[:at]...), want...), content[end:]...)
	return out, true
}

// upToDate reports whether the file holds the block as it should be.
func (e rcEdit) upToDate() bool {
	b, err := os.ReadFile(e.path)
	if err != nil {
		return false
	}
	if e.own {
		return string(b) == block(e.code)
	}
	_, changed := withBlock(b, e.code)
	return !changed
}

// apply writes the block into the file, atomically and keeping its mode;
// a symlinked file (dotfiles kept in a repository) is written where the
// link points, and the link stays. It says what it did, "" when the file
// was up to date.
func (e rcEdit) apply() (string, error) {
	target := e.path
	if fi, err := os.Lstat(e.path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(e.path)
		if err != nil {
			return "", fmt.Errorf("%s is a symlink to a missing file; left as it is", e.name)
		}
		target = real
	}
	old, err := os.ReadFile(target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", e.name, err)
	}
	var content []byte
	changed := true
	did := "put ~/.local/bin on PATH in " + e.name
	if e.own {
		content = []byte(block(e.code))
		changed = string(old) != string(content)
	} else {
		if findBlock(old) < 0 {
			did = "put ~/.local/bin on PATH at the top of " + e.name
		} else {
			did = "updated the PATH line in " + e.name
		}
		content, changed = withBlock(old, e.code)
	}
	if !changed {
		return "", nil
	}
	mode := fs.FileMode(0644)
	if fi, err := os.Stat(target); err == nil {
		mode = fi.Mode().Perm()
	} else if err := os.MkdirAll(filepath.Dir(target), 0700); err != nil {
		return "", fmt.Errorf("writing %s: %w", e.name, err)
	}
	if err := paths.WriteFileAtomic(target, content, mode); err != nil {
		return "", fmt.Errorf("writing %s: %w", e.name, err)
	}
	return did, nil
}

// loginShell is this user's login shell: the password database's, as
// sshd reads it (getent asks NSS, so LDAP and the like count), else
// /etc/passwd, else $SHELL, which sshd sets from it. A variable, so that
// tests can give another.
var loginShell = func() string {
	uid := strconv.Itoa(os.Getuid())
	if out, err := exec.Command("getent", "passwd", uid).Output(); err == nil {
		if s := passwdShell(string(out), uid); s != "" {
			return s
		}
	}
	if b, err := os.ReadFile("/etc/passwd"); err == nil {
		if s := passwdShell(string(b), uid); s != "" {
			return s
		}
	}
	return os.Getenv("SHELL")
}

// passwdShell is the shell of uid's line in passwd(5) text.
func passwdShell(text, uid string) string {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) >= 7 && f[2] == uid {
			return f[6]
		}
	}
	return ""
}

// The ollie command as the login shell finds it, as the probe reports it
// (resolveScript): ours (a script deploy installed: ~/.local/bin/ollie or
// the -system wrapper), another program of that name, or none.
const (
	foundOurs  = "ours"
	foundOther = "other"
	foundNone  = "none"
)

// ollieMark is in every ollie command deploy installs.
const ollieMark = "# installed by ollie-remote deploy"

// resolveScript prints where the login shell's PATH finds "ollie": sh
// inherits that PATH from the login shell that ran it, after the shell
// read its files, as "ssh HOST ollie" would find it.
const resolveScript = `o=$(command -v ollie 2>/dev/null) || o=
case $o in
'') echo none ;;
/*) if grep -q '` + ollieMark + `' "$o" 2>/dev/null; then printf 'ours %s\n' "$o"; else printf 'other %s\n' "$o"; fi ;;
*) printf 'other %s\n' "$o" ;;
esac`

// parseFound reads resolveScript's line.
func parseFound(line string) (state, path string) {
	state, path, _ = strings.Cut(strings.TrimSpace(line), " ")
	switch state {
	case foundOurs, foundOther, foundNone:
		return state, path
	}
	return "", ""
}

// sshHint is how to type host for ssh: an alias as it is; [USER@]HOST:PORT
// as ssh takes it, -p PORT [USER@]HOST.
func sshHint(host string) string {
	if i := strings.LastIndexByte(host, ':'); i > 0 && !strings.Contains(host[:i], ":") {
		if _, err := strconv.Atoi(host[i+1:]); err == nil {
			return "-p " + host[i+1:] + " " + host[:i]
		}
	}
	return host
}

// maxShellField bounds a host's word (its login shell, a path) in a note.
const maxShellField = 256

// commandNote says what is wrong with "ssh HOST ollie" and what to type
// instead, or "" when it runs ollie's command. shell and path are the
// host's words, made safe here; rcProblems are the host's reasons its
// files could not be edited.
func commandNote(host, shell, state, path string, rcProblems []string) string {
	h := termsafe.Field(sshHint(host), maxShellField)
	do := fmt.Sprintf("type ssh %s .local/bin/ollie, or install it for every user with ollie-remote deploy -system %s", h, termsafe.Field(host, maxShellField))
	sh := termsafe.Field(shell, maxShellField)
	switch state {
	case foundOurs:
		return ""
	case foundOther:
		return fmt.Sprintf("ssh %s ollie runs %s, which is not ollie's; type ssh %s .local/bin/ollie", h, termsafe.Field(path, maxShellField), h)
	case foundNone:
	default:
		return fmt.Sprintf("could not tell whether ssh %s ollie finds the command; if it does not, %s", h, do)
	}
	if len(rcProblems) > 0 {
		return fmt.Sprintf("ssh %s ollie is not found: %s; %s", h, termsafe.Field(strings.Join(rcProblems, "; "), MaxHostMessage), do)
	}
	switch kindOf(shell) {
	case shellNone:
		return fmt.Sprintf("ssh %s ollie is not found: the login shell %s reads no file for ssh commands; %s", h, sh, do)
	case shellOther:
		return fmt.Sprintf("ssh %s ollie is not found: ollie does not know what the login shell %s reads for ssh commands; %s", h, sh, do)
	}
	return fmt.Sprintf("ssh %s ollie is not found although deploy put ~/.local/bin on PATH for the login shell %s (something after it undoes it); %s", h, orUnknownShell(sh), do)
}

func orUnknownShell(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
