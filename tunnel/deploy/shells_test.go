package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestShEveryLoginShell runs Sh's command line as each login shell sshd
// may hand it to (those installed here) and checks that sh gets the
// script and its arguments byte for byte: quotes, backslashes, "!",
// "%", "$" and newlines, which fish and csh read otherwise than sh.
func TestShEveryLoginShell(t *testing.T) {
	script := `x='it''s' y="\\n"
printf '[%s]\n' "$@"
printf '<%s>' "$x" "$y" '!x' '%s' "$#"
if true; then
	echo
fi`
	args := []string{"one two", "it's", "$HOME", "!x", "a\nb", `c\\d`, "", "%d", "\x01 \t end"}
	want, err := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := Sh(script, args...)
	// What fish and csh would read otherwise than sh: none of it.
	if strings.ContainsAny(cmd, "\n!") || regexp.MustCompile(`\\[^0-7]`).MatchString(cmd) {
		t.Errorf("the command line holds a newline, a \"!\" or a backslash escaping a character: %q", cmd)
	}
	shells := [][]string{{"bash"}, {"zsh"}, {"dash"}, {"busybox", "ash"}, {"ksh93"}, {"mksh"}, {"fish"}, {"tcsh"}, {"csh"}}
	ran := 0
	for _, sh := range shells {
		p, err := exec.LookPath(sh[0])
		if err != nil {
			continue
		}
		ran++
		argv := append(append([]string{}, sh[1:]...), "-c", cmd)
		c := exec.Command(p, argv...)
		c.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
		got, err := c.CombinedOutput()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s -c: %v\n got %q\nwant %q", strings.Join(sh, " "), err, got, want)
		}
	}
	if ran == 0 {
		t.Skip("no shell to try")
	}
}

func TestKindOf(t *testing.T) {
	for shell, want := range map[string]shellKind{
		"": shellUnknown, "/bin/bash": shellBash, "/usr/bin/zsh": shellZsh, "/usr/local/bin/fish": shellFish,
		"/bin/tcsh": shellCsh, "/bin/csh": shellCsh, "/bin/sh": shellNone, "/bin/dash": shellNone, "/x/ash": shellNone,
		"/bin/ksh": shellNone, "/bin/mksh": shellNone, "/usr/bin/ksh93": shellNone, "/usr/bin/xonsh": shellOther,
		"-bash": shellBash,
	} {
		if got := kindOf(shell); got != want {
			t.Errorf("kindOf(%q) = %v, want %v", shell, got, want)
		}
	}
}

// TestWithBlock: the block goes first in a file without one, replaces
// an older one in place, and is never written twice.
func TestWithBlock(t *testing.T) {
	rest := "# my rc\n[ -z \"$PS1\" ] && return\nalias ll='ls -l'\n"
	once, changed := withBlock([]byte(rest), shPathLine)
	if !changed || string(once) != block(shPathLine)+rest {
		t.Fatalf("first edit: %v\n%s", changed, once)
	}
	twice, changed := withBlock(once, shPathLine)
	if changed || !bytes.Equal(twice, once) {
		t.Errorf("a second edit changed the file:\n%s", twice)
	}
	// An older block, somewhere in the file, is replaced where it is.
	old := "# top\n" + pathMarker + "\nPATH=old\n" + rest
	got, changed := withBlock([]byte(old), shPathLine)
	if want := "# top\n" + block(shPathLine) + rest; !changed || string(got) != want {
		t.Errorf("replacing:\n%s\nwant:\n%s", got, want)
	}
	// A marker as the file's last line, without a newline.
	got, _ = withBlock([]byte(rest+pathMarker), shPathLine)
	if want := rest + block(shPathLine); string(got) != want {
		t.Errorf("marker at the end:\n%q\nwant:\n%q", got, want)
	}
	// CRLF files: the marker is found, not written again.
	crlf := []byte("# dos\r\n" + pathMarker + "\r\nPATH=old\r\nrest\r\n")
	got, _ = withBlock(crlf, shPathLine)
	if strings.Count(string(got), pathMarker) != 1 || !strings.HasSuffix(string(got), "rest\r\n") {
		t.Errorf("CRLF file:\n%q", got)
	}
}

// TestRcEditsPerShell installs the command for each login shell in a
// fresh home and checks which files it edited; then runs each shell that
// is installed here, as sshd runs a command, to see it find ollie.
func TestRcEditsPerShell(t *testing.T) {
	cases := []struct {
		shell  string
		before []string // files the home has
		want   []string // files that get the block
	}{
		{"/bin/bash", nil, []string{".bashrc"}},
		{"/usr/bin/zsh", nil, []string{".zshenv"}},
		{"/usr/bin/fish", nil, []string{".config/fish/conf.d/ollie.fish"}},
		{"/usr/bin/tcsh", nil, []string{".cshrc"}},
		{"/usr/bin/tcsh", []string{".tcshrc"}, []string{".tcshrc"}},
		{"/usr/bin/tcsh", []string{".tcshrc", ".cshrc"}, []string{".tcshrc", ".cshrc"}},
		{"/bin/csh", nil, []string{".cshrc"}},
		{"/bin/dash", nil, nil},
		{"/bin/ksh", []string{".bashrc"}, nil},
		{"", []string{".zshenv"}, []string{".bashrc", ".zshenv"}},
	}
	for _, tc := range cases {
		t.Run(filepath.Base(tc.shell)+"+"+strings.Join(tc.before, ","), func(t *testing.T) {
			home := t.TempDir()
			for _, f := range tc.before {
				os.WriteFile(filepath.Join(home, f), []byte("# theirs\n"), 0600)
			}
			for _, e := range rcEdits(home, "", kindOf(tc.shell)) {
				if _, err := e.apply(); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for _, f := range []string{".bashrc", ".zshenv", ".config/fish/conf.d/ollie.fish", ".tcshrc", ".cshrc"} {
				if b, err := os.ReadFile(filepath.Join(home, f)); err == nil && strings.Contains(string(b), pathMarker) {
					got = append(got, f)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("edited %v, want %v", got, tc.want)
			}
			for _, f := range tc.before {
				if fi, err := os.Stat(filepath.Join(home, f)); err != nil || fi.Mode().Perm() != 0600 {
					t.Errorf("%s lost its mode: %v %v", f, fi.Mode(), err)
				}
			}
			// A second deploy changes nothing.
			for _, e := range rcEdits(home, "", kindOf(tc.shell)) {
				if did, err := e.apply(); err != nil || did != "" || !e.upToDate() {
					t.Errorf("%s again: %q, %v", e.name, did, err)
				}
			}
			if tc.shell != "" && len(tc.want) > 0 && kindOf(tc.shell) != shellBash {
				findsOllie(t, tc.shell, home)
			}
		})
	}
}

// findsOllie runs the shell as sshd runs "ssh HOST ollie" (without the
// bashrc of bash, which only sshd's own environment triggers) and
// checks that it finds ~/.local/bin/ollie.
func findsOllie(t *testing.T, shell, home string) {
	t.Helper()
	p, err := exec.LookPath(filepath.Base(shell))
	if err != nil {
		return
	}
	bin := filepath.Join(home, ".local", "bin")
	os.MkdirAll(bin, 0755)
	os.WriteFile(filepath.Join(bin, "ollie"), []byte("#!/bin/sh\necho ollie ran \"$@\"\n"), 0755)
	c := exec.Command(p, "-c", "ollie version")
	c.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin"}
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ollie ran version" {
		t.Errorf("%s -c 'ollie version': %v %q", shell, err, out)
	}
}

// TestRcEditSymlink: a dotfile that is a symlink (kept in a repository)
// is edited where it points, and stays a symlink; a dangling one is left
// as it is, and said so.
func TestRcEditSymlink(t *testing.T) {
	home := t.TempDir()
	repo := filepath.Join(t.TempDir(), "dotfiles")
	os.Mkdir(repo, 0755)
	os.WriteFile(filepath.Join(repo, "bashrc"), []byte("# mine\n"), 0640)
	os.Symlink(filepath.Join(repo, "bashrc"), filepath.Join(home, ".bashrc"))
	e := rcEdits(home, "", shellBash)[0]
	if _, err := e.apply(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(home, ".bashrc"))
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("~/.bashrc is no longer a symlink: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(filepath.Join(repo, "bashrc"))
	if string(b) != block(shPathLine)+"# mine\n" {
		t.Errorf("the link's target holds:\n%s", b)
	}
	if fi, _ := os.Stat(filepath.Join(repo, "bashrc")); fi.Mode().Perm() != 0640 {
		t.Errorf("the target's mode is %v", fi.Mode())
	}

	os.Remove(filepath.Join(repo, "bashrc"))
	if _, err := e.apply(); err == nil || !strings.Contains(err.Error(), "symlink to a missing file") {
		t.Errorf("a dangling symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(repo, "bashrc")); err == nil {
		t.Error("a dangling symlink's target was created")
	}
}

// TestCommitPerLoginShell is install commit for a dash user and a tcsh
// user: the report names the shell, the manifest says installed once
// the shell's files are (for dash: the script alone), and a file that
// cannot be written is a problem reported, not a failed commit.
func TestCommitPerLoginShell(t *testing.T) {
	for _, shell := range []string{"/bin/dash", "/usr/bin/tcsh"} {
		t.Run(filepath.Base(shell), func(t *testing.T) {
			root := installRoot(t)
			defer func(f func() string) { loginShell = f }(loginShell)
			loginShell = func() string { return shell }
			rep, stderr, code := installCommitJSON(t, Plan{Root: root, Version: "v1", Keep: 3, Files: []PlannedFile{
				installUpload(t, root, "v1/olliesrv", "binary 1", "binary 1")}})
			if code != 0 || rep.Shell != shell || len(rep.Problems) != 0 {
				t.Fatalf("commit: exit %d %s, report %+v", code, stderr, rep)
			}
			home, _ := os.UserHomeDir()
			_, err := os.Stat(filepath.Join(home, ".cshrc"))
			if (shell == "/usr/bin/tcsh") != (err == nil) {
				t.Errorf("~/.cshrc: %v", err)
			}
			if _, err := os.Stat(filepath.Join(home, ".bashrc")); err == nil {
				t.Errorf("~/.bashrc was written for a %s user", shell)
			}
			m, err := ReadManifest(root, nil)
			if err != nil || !m.Installed || m.Shell != shell {
				t.Errorf("manifest: %+v %v", m, err)
			}
		})
	}
	// A file that cannot be edited (a symlink to nothing) is a problem
	// the report names; the commit goes through.
	root := installRoot(t)
	defer func(f func() string) { loginShell = f }(loginShell)
	loginShell = func() string { return "/bin/bash" }
	home, _ := os.UserHomeDir()
	os.Symlink(filepath.Join(home, "gone"), filepath.Join(home, ".bashrc"))
	rep, stderr, code := installCommitJSON(t, Plan{Root: root, Version: "v1", Keep: 3, Files: []PlannedFile{
		installUpload(t, root, "v1/olliesrv", "binary 1", "binary 1")}})
	if code != 0 || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "~/.bashrc is a symlink to a missing file") {
		t.Errorf("commit: exit %d %s, report %+v", code, stderr, rep)
	}
	if _, err := os.Stat(filepath.Join(home, ".local/bin/ollie")); err != nil {
		t.Errorf("the command was not installed: %v", err)
	}
}

func TestCommandNote(t *testing.T) {
	for _, tc := range []struct {
		host, shell, state, path string
		problems                 []string
		want                     string
	}{
		{"h1", "/bin/bash", foundOurs, "/home/u/.local/bin/ollie", nil, ""},
		{"h1", "/bin/dash", foundNone, "", nil,
			"ssh h1 ollie is not found: the login shell /bin/dash reads no file for ssh commands; type ssh h1 .local/bin/ollie, or install it for every user with ollie-remote deploy -system h1"},
		{"u@h1:2222", "/bin/ksh", foundNone, "", nil,
			"ssh -p 2222 u@h1 ollie is not found: the login shell /bin/ksh reads no file for ssh commands; type ssh -p 2222 u@h1 .local/bin/ollie, or install it for every user with ollie-remote deploy -system u@h1:2222"},
		{"h1", "/bin/bash", foundOther, "/usr/bin/ollie", nil,
			"ssh h1 ollie runs /usr/bin/ollie, which is not ollie's; type ssh h1 .local/bin/ollie"},
		{"h1", "/bin/bash", foundNone, "", []string{"writing ~/.bashrc: permission denied"},
			"ssh h1 ollie is not found: writing ~/.bashrc: permission denied; type ssh h1 .local/bin/ollie, or install it for every user with ollie-remote deploy -system h1"},
		{"h1", "/bin/bash", "", "", nil,
			"could not tell whether ssh h1 ollie finds the command; if it does not, type ssh h1 .local/bin/ollie, or install it for every user with ollie-remote deploy -system h1"},
		{"h1", "/bin/\x1b[31mevil", foundNone, "", nil,
			`ssh h1 ollie is not found: ollie does not know what the login shell /bin/\x1b[31mevil reads for ssh commands; type ssh h1 .local/bin/ollie, or install it for every user with ollie-remote deploy -system h1`},
	} {
		if got := commandNote(tc.host, tc.shell, tc.state, tc.path, tc.problems); got != tc.want {
			t.Errorf("commandNote(%q, %q, %q):\n got %s\nwant %s", tc.host, tc.shell, tc.state, got, tc.want)
		}
	}
}

func TestParseSystemProbe(t *testing.T) {
	for _, tc := range []struct{ out, state, detail string }{
		{"none\n", "none", ""},
		{"symlink /home/alice/.local/bin/ollie\n", "other", "a symlink to /home/alice/.local/bin/ollie"},
		{"file -rwxr-xr-x 1 root root 200 Jan 1 00:00 /usr/local/bin/ollie\n" + systemWrapper, "same", ""},
		{"file -rwxr-xr-x 1 root root 200 Jan 1 00:00 /usr/local/bin/ollie\n#!/bin/sh\n" + systemMark + " (an older one)\n", "ours", ""},
		{"file -rwxr-xr-x 1 bob bob 20 Jan 1 00:00 /usr/local/bin/ollie\n#!/bin/sh\necho hi\n", "other", "-rwxr-xr-x 1 bob bob 20 Jan 1 00:00 /usr/local/bin/ollie"},
		{"\x1b[2J", "other", "the host's answer made no sense"},
	} {
		if state, detail := parseSystemProbe([]byte(tc.out)); state != tc.state || detail != tc.detail {
			t.Errorf("parseSystemProbe(%.40q) = %q, %q; want %q, %q", tc.out, state, detail, tc.state, tc.detail)
		}
	}
}
