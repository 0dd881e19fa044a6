package deploy

// The desktop half: push the olliesrv built for a host's OS and architecture and the
// data files to ~/.local/share/ollie on the host, over one SSH connection.
// Files are uploaded over SFTP under temporary names; the host's own
// olliesrv (install commit) checks, fsyncs and renames them, so an
// interrupted upload never leaves a half-written file in place.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"ollie/broker"
	"ollie/internal/termsafe"
	"ollie/tunnel"
)

// LocalFile is a file to deploy: its path on the desktop and its content.
type LocalFile struct {
	Src    string
	SHA256 string
	Mode   fs.FileMode
	Size   int64
}

// Bundle is what a deploy pushes: the binaries by Platform and the data
// files by path under data/. It is hashed once per run.
type Bundle struct {
	Bins map[string]LocalFile // "linux/amd64" -> olliesrv
	Data map[string]LocalFile // "tools/disk_usage.meta" -> file
}

// LoadBundle finds the binaries (binDir/OS-ARCH/olliesrv, and
// binDir/olliesrv for the desktop's own Platform) and hashes them and every
// file under dataDir.
func LoadBundle(binDir, dataDir string, local string) (*Bundle, error) {
	b := &Bundle{Bins: map[string]LocalFile{}, Data: map[string]LocalFile{}}
	ents, _ := os.ReadDir(binDir)
	for _, e := range ents {
		osName, arch, ok := strings.Cut(e.Name(), "-")
		if !ok || !e.IsDir() {
			continue
		}
		if f, err := hashFile(filepath.Join(binDir, e.Name(), "olliesrv")); err == nil {
			b.Bins[osName+"/"+arch] = f
		}
	}
	if _, ok := b.Bins[local]; !ok {
		if f, err := hashFile(filepath.Join(binDir, "olliesrv")); err == nil {
			b.Bins[local] = f
		}
	}
	if len(b.Bins) == 0 {
		return nil, fmt.Errorf("no olliesrv binaries under %s: run make cross (or make build for this Platform)", binDir)
	}
	err := filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := hashFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dataDir, p)
		b.Data[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	return b, nil
}

func hashFile(p string) (LocalFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return LocalFile{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return LocalFile{}, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return LocalFile{}, err
	}
	return LocalFile{Src: p, SHA256: hex.EncodeToString(h.Sum(nil)), Mode: fi.Mode().Perm(), Size: n}, nil
}

// VersionOf names a binary's directory on the host: its content hash, so
// that the same build is the same version everywhere.
func VersionOf(f LocalFile) string { return f.SHA256[:12] }

// Result is one host's line in the final table.
type Result struct {
	Host     string        `json:"host"`
	Platform string        `json:"platform"`
	Version  string        `json:"version"`
	Sent     int64         `json:"sent"`  // bytes of file content on the wire (compressed)
	Size     int64         `json:"size"`  // what those files are once decoded
	Files    int           `json:"files"` // files uploaded
	Took     time.Duration `json:"took"`
	Changed  []string      `json:"changed"`
	Err      string        `json:"err,omitempty"`
	// Shell is the user's login shell on the host, which runs "ssh HOST
	// CMD": the host's word, "" when it did not say.
	Shell string `json:"shell,omitempty"`
	// Degraded says why the host works less well than it could, each a
	// sentence naming what to do: "ssh HOST ollie" does not find the
	// command (and what to type instead), or -system did not install it
	// (and why). Empty when all is well. The host's words in it are made
	// terminal-safe.
	Degraded []string `json:"degraded,omitempty"`
}

// probeScript prints the host's Platform and home, where the login
// shell finds "ollie", the decompressors on its PATH, what making dirs
// (under the root) said, then what the installed olliesrv (if any) says
// the host holds. It runs under /bin/sh whatever the user's login shell
// is. Making the directories here, which the uploads need, spares an exec
// of their own; a host that turns out up to date has them already.
func probeScript(dirs []string) string {
	test, args := "", ""
	for _, d := range dirs {
		q := `"$r"/` + ShellQuote(d)
		test += `[ -d ` + q + ` ] && `
		args += " " + q
	}
	return `uname -sm; printf '%s\n' "$HOME"
` + resolveScript + `
for p in zstd xz gzip; do command -v $p >/dev/null 2>&1 && printf '%s ' $p; done; echo
r="$HOME/.local/share/ollie"
m=; ` + test + `[ -d "$r" ] || m=$(mkdir -p -- "$r"` + args + ` 2>&1)
set -f; printf '%s ' $m; echo; set +f
if [ -x "$r/current/olliesrv" ] && "$r/current/olliesrv" install manifest "$r" "$@" 2>/dev/null; then :; else echo '{}'; fi`
}

// uploadDirs are the directories under the root that b's data files go
// to.
func uploadDirs(b *Bundle) []string {
	seen := map[string]bool{}
	var dirs []string
	for rel := range b.Data {
		if d := path.Dir("data/" + rel); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// Platform maps uname -sm to Go's names.
func Platform(uname string) (string, error) {
	f := strings.Fields(uname)
	if len(f) != 2 {
		return "", fmt.Errorf("unexpected uname output %q", uname)
	}
	osName := strings.ToLower(f[0])
	arch := map[string]string{"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
		"armv7l": "arm", "armv6l": "arm", "i686": "386", "i386": "386", "riscv64": "riscv64", "ppc64le": "ppc64le", "s390x": "s390x"}[f[1]]
	if arch == "" {
		arch = f[1]
	}
	return osName + "/" + arch, nil
}

// Sh is a command line that runs script under /bin/sh with args, whatever
// the login shell that sshd hands it to. fish and csh read quotes,
// backslashes, "!" and newlines otherwise than sh does (tcsh refuses a
// newline inside quotes, and expands "!" in them), so the script and its
// arguments travel as printf escapes inside one single-quoted word that
// holds none of those: every login shell passes it to sh as it is, and
// sh's printf turns it back into the script.
func Sh(script string, args ...string) string {
	var b strings.Builder
	b.WriteString("set --")
	for _, a := range args {
		b.WriteString(" " + ShellQuote(a))
	}
	b.WriteString("\n")
	b.WriteString(script)
	return `exec /bin/sh -c 'eval "$(printf "` + printfEscape(b.String()) + `")"'`
}

// printfEscape writes s as a printf format that prints s: letters,
// digits and a few plain marks as they are, "%" doubled, every other byte
// as an octal escape.
func printfEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte(" _./,:=+@-", c) >= 0:
			b.WriteByte(c)
		case c == '%':
			b.WriteString("%%")
		default:
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	return b.String()
}

// Deadlines bound each remote step, so that one host that stops answering
// never holds up the others' results. The zero value is the defaults.
type Deadlines struct {
	// Step bounds a probe, mkdir, olliesrv start or stop and the status
	// query: default 30 s. An upload gets Step plus a second for each
	// minRate bytes; a commit, which may restart the daemon (up to 45 s
	// on the host), three times Step.
	Step time.Duration `json:"step,omitempty"`
}

// minRate is the slowest upload Deadlines allow for: 32 KiB/s.
const minRate = 32 << 10

// Output kept from each remote step: the manifest and the commit's report
// grow with the data files; start, stop and mkdir say a line.
const (
	maxReport     = 1 << 20
	MaxSmallReply = 4 << 10
)

func (d Deadlines) ForStep() time.Duration {
	if d.Step <= 0 {
		return 30 * time.Second
	}
	return d.Step
}

func (d Deadlines) ForUpload(size int64) time.Duration {
	return d.ForStep() + time.Duration(size/minRate)*time.Second
}

func (d Deadlines) ForCommit() time.Duration { return 3 * d.ForStep() }

// stepTimeout is the cause of a step's context ending at its deadline.
type stepTimeout struct{ After time.Duration }

func (e *stepTimeout) Error() string { return fmt.Sprintf("timed out after %v", e.After) }

func (e *stepTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// Within returns ctx bounded by d, whose end past d has a *stepTimeout as
// its cause.
func Within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &stepTimeout{After: d})
}

// Push brings one host up to date over c and says what it did.
func Push(ctx context.Context, c *tunnel.Client, b *Bundle, keep int, dl Deadlines, progress func(string)) Result {
	return PushWith(ctx, c, b, Options{Keep: keep, Deadlines: dl, Progress: progress})
}

// Options say how PushWith deploys.
type Options struct {
	Keep      int // versions kept on the host, the current one included; 0 means 3
	Deadlines Deadlines
	Progress  func(string) // hears each step; nil: nobody
	// System, when set, also installs the ollie command for every user
	// of the host (SystemCommand) with sudo, as System approves and
	// gives the password for (see InstallSystem).
	System broker.Approver
}

// PushWith brings one host up to date over c, and says what it did and
// whether "ssh HOST ollie" finds the command (Result.Degraded).
func PushWith(ctx context.Context, c *tunnel.Client, b *Bundle, o Options) (res Result) {
	keep, dl, progress := o.Keep, o.Deadlines, o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	start := time.Now()
	res.Host = c.Target().Alias
	defer func() { res.Took = time.Since(start) }()
	fail := func(err error) Result {
		res.Err = err.Error()
		return res
	}
	if c.Appliance() {
		if err := pushAppliance(ctx, c, b, o, &res); err != nil {
			return fail(err)
		}
		if o.System != nil {
			res.Degraded = append(res.Degraded, "-system does nothing on a host served by ollie's own SSH listener: ssh "+termsafe.Field(sshHint(res.Host), maxShellField)+" ollie is the listener's shell already")
		}
		return res
	}

	var versions []string
	for _, f := range b.Bins {
		versions = append(versions, VersionOf(f))
	}
	sort.Strings(versions)
	link := measureLink(c.SSH())
	pctx, cancel := Within(ctx, dl.ForStep())
	out, err := c.RunLimit(pctx, Sh(probeScript(uploadDirs(b)), versions...), nil, maxReport)
	cancel()
	if err != nil {
		return fail(RemoteError("probing the host", err))
	}
	lines := strings.SplitN(string(out), "\n", 6)
	if len(lines) < 6 {
		return fail(fmt.Errorf("probing the host: unexpected answer %q", out))
	}
	plat, err := Platform(lines[0])
	if err != nil {
		return fail(err)
	}
	res.Platform = plat
	home := strings.TrimSpace(lines[1])
	if !path.IsAbs(home) {
		return fail(fmt.Errorf("the host gave no home directory (HOME=%q)", home))
	}
	var m Manifest
	found, foundPath := parseFound(lines[2])
	cold := strings.Fields(lines[3])
	mkdirSaid := strings.TrimSpace(lines[4])
	if err := json.Unmarshal([]byte(lines[5]), &m); err != nil {
		return fail(fmt.Errorf("reading the host's manifest: %w", err))
	}
	bin, ok := b.Bins[plat]
	if !ok {
		return fail(fmt.Errorf("no olliesrv built for %s: build it with make cross PLATFORMS=%s", plat, plat))
	}
	root := path.Join(home, ".local/share/ollie")
	ver := VersionOf(bin)
	res.Version = ver

	near := link.near()
	up, remove, helperVer := changes(b, bin, ver, &m, cold, false, near)
	tr := sftpTransport{root: root, ver: ver, writes: writesInFlight(link.rtt())}
	if len(up) > 0 && mkdirSaid != "" {
		return fail(fmt.Errorf("making directories: %s", termsafe.Field(mkdirSaid, MaxHostMessage)))
	}
	daemonOK := m.Daemon == "" || m.Daemon == path.Join(root, ver, "olliesrv")
	res.Shell = termsafe.Field(m.Shell, maxShellField)
	var rcProblems []string
	if len(up) == 0 && len(remove) == 0 && m.Current == ver && m.Installed && daemonOK {
		res.Changed = []string{"up to date: no file sent"}
		keepDeployed(bin)
	} else {
		rep, err := commitFilesVia(ctx, c, tr, &res, root, ver, helperVer, up, remove, keep, dl, progress, false)
		if err != nil {
			return fail(err)
		}
		if rep.Shell != "" {
			res.Shell = termsafe.Field(rep.Shell, maxShellField)
		}
		rcProblems = hostLines(rep.Problems)
		keepDeployed(bin)
		if !m.Installed {
			// The command or the login shell's files changed: ask it again.
			if found, foundPath, err = resolveOllie(ctx, c, dl); err != nil {
				found, foundPath = "", ""
			}
		}
	}
	if o.System != nil {
		did, problem := InstallSystem(ctx, c, res.Host, o.System, dl, progress)
		res.Changed = append(res.Changed, did...)
		if problem != "" {
			res.Degraded = append(res.Degraded, problem)
		}
		if len(did) > 0 {
			if found, foundPath, err = resolveOllie(ctx, c, dl); err != nil {
				found, foundPath = "", ""
			}
		}
	}
	if note := commandNote(res.Host, res.Shell, found, foundPath, rcProblems); note != "" {
		res.Degraded = append([]string{note}, res.Degraded...)
	}
	return res
}

// A transport carries files to the host and has them committed there:
// over SFTP and sh where OpenSSH serves the host, as a tar stream to the
// appliance listener's own commands where it does not.
type transport interface {
	// send uploads up, setting each one's tmp, and counts the bytes moved.
	send(ctx context.Context, c *tunnel.Client, up []upload, dl Deadlines, moved *atomic.Int64) (int64, error)
	// commit runs install commit with plan on stdin; helper is the binary
	// that should run it, where the transport can choose; pre, if not
	// nil, is the binary sent for a decompressor of the host, to be run
	// into its plain name first.
	commit(ctx context.Context, c *tunnel.Client, helper string, plan []byte, pre *upload) ([]byte, error)
}

// commitFilesVia uploads what the host lacks and commits it with the
// host's olliesrv (the installed helperVer's, or the new binary itself
// when ""), sending again once what arrived damaged; res counts what was
// sent and hears what changed.
func commitFilesVia(ctx context.Context, c *tunnel.Client, tr transport, res *Result, root, ver, helperVer string, up []upload, remove []string, keep int, dl Deadlines, progress func(string), appliance bool) (*Report, error) {
	plat := res.Platform

	if len(up) > 0 {
		var total, size int64
		how := ""
		for _, u := range up {
			total += u.sending()
			size += u.want.Size
			if u.enc != "" {
				how = fmt.Sprintf("; the binary's %s as %s", HumanBytes(u.want.Size), describeEnc(u))
			}
		}
		progress(fmt.Sprintf("%s, sending %d files (%s%s)", plat, len(up), HumanBytes(total), how))
	}
	// The listener restarts itself once the commit has answered: a
	// restart inside the commit would end the connection carrying it.
	plan := Plan{Root: root, Version: ver, Remove: remove, Keep: keep, Restart: !appliance, Appliance: appliance}
	for attempt := 1; ; attempt++ {
		var size int64
		for _, u := range up {
			size += u.sending()
		}
		uctx, cancel := Within(ctx, dl.ForUpload(size))
		sent, err := sendWithProgress(uctx, c, tr, up, dl, progress)
		cancel()
		for i := range up {
			up[i].sent()
		}
		res.Sent += sent
		res.Files += len(up)
		for _, u := range up {
			res.Size += u.want.Size
		}
		if err != nil {
			return nil, fmt.Errorf("uploading: %w", err)
		}
		plan.Files = plan.Files[:0]
		// The new binary commits itself; with no new binary the installed
		// one of this version does the work, and a binary sent for the
		// installed olliesrv to decode is committed by that one.
		helper := path.Join(root, ver, "olliesrv")
		if helperVer != "" {
			helper = path.Join(root, helperVer, "olliesrv")
		}
		var pre *upload
		for i := range up {
			u := &up[i]
			pf := PlannedFile{Tmp: u.tmp, Path: u.path, SHA256: u.want.SHA256, Mode: u.want.Mode}
			switch {
			case u.program != "":
				u.plain = path.Join(path.Dir(u.tmp), "."+path.Base(u.path)+".ollie-tmp-"+RandomHex(6))
				pf.Tmp, pre = u.plain, u
			case u.enc != "":
				pf.Encoding, pf.Base = u.enc, u.base
			}
			plan.Files = append(plan.Files, pf)
			if u.path == ver+"/olliesrv" && helperVer == "" {
				helper = path.Join(root, pf.Tmp)
			}
		}
		planJSON, _ := json.Marshal(plan)
		cctx, cancel := Within(ctx, dl.ForCommit())
		out, err := tr.commit(cctx, c, helper, planJSON, pre)
		cancel()
		if err != nil {
			return nil, RemoteError("committing on the host", err)
		}
		var rep Report
		if err := json.Unmarshal(out, &rep); err != nil {
			return nil, fmt.Errorf("reading the host's report %q: %w", out, err)
		}
		res.Changed = append(res.Changed, rep.Changed...)
		if len(rep.Bad) == 0 {
			if res.Files > 0 {
				res.Changed = append([]string{fmt.Sprintf("%d files sent", res.Files)}, res.Changed...)
			}
			return &rep, nil
		}
		if attempt == 2 {
			return nil, fmt.Errorf("%s arrived damaged twice; check the host's disk (df -h ~) and run deploy again", strings.Join(rep.Bad, ", "))
		}
		progress(fmt.Sprintf("%d files arrived damaged, sending them again", len(rep.Bad)))
		var again []upload
		for _, u := range up {
			for _, bad := range rep.Bad {
				if u.path == bad {
					again = append(again, upload{src: u.src, want: u.want, path: u.path, runs: u.runs, enc: u.enc, base: u.base, program: u.program})
				}
			}
		}
		up, plan.Remove = again, nil
	}
}

// sftpTransport is the OpenSSH way: SFTP for the files, each with writes
// SFTP writes in flight (see link.go), sh for the commit, which first
// makes the directory of version ver.
type sftpTransport struct {
	root, ver string
	writes    int
}

func (t sftpTransport) send(ctx context.Context, c *tunnel.Client, up []upload, dl Deadlines, moved *atomic.Int64) (int64, error) {
	return uploadAll(ctx, c, t.root, up, t.writes, moved)
}

func (t sftpTransport) commit(ctx context.Context, c *tunnel.Client, helper string, plan []byte, pre *upload) ([]byte, error) {
	if pre != nil {
		// The host's decompressor makes the binary that then commits.
		return c.RunLimit(ctx, Sh(`set -e; cd "$1"; mkdir -p -- "$6"; "$2" -dc < "$3" > "$4"; rm -f -- "$3"; chmod 700 "$4"; exec "$5" install commit`,
			t.root, pre.program, pre.tmp, pre.plain, helper, t.ver), strings.NewReader(string(plan)), maxReport)
	}
	return c.RunLimit(ctx, Sh(`set -e; mkdir -p -- "$2"; exec "$1" install commit`, helper, path.Join(t.root, t.ver)), strings.NewReader(string(plan)), maxReport)
}

// describeEnc says how an upload travels, for progress.
func describeEnc(u upload) string {
	if u.stream != nil {
		return fmt.Sprintf("%s, compressed as it is sent, unpacked by the host's %s", strings.TrimSuffix(u.enc, "-cli"), orOlliesrv(u.program))
	}
	switch u.enc {
	case EncPatch:
		return fmt.Sprintf("a %s zstd patch against %s", HumanBytes(u.src.Size), u.base)
	case EncZstd:
		return HumanBytes(u.src.Size) + " of zstd, unpacked by the host's olliesrv"
	}
	return fmt.Sprintf("%s of %s, unpacked by the host's %s", HumanBytes(u.src.Size), strings.TrimSuffix(u.enc, "-cli"), u.program)
}

func orOlliesrv(program string) string {
	if program == "" {
		return "olliesrv"
	}
	return program
}

// resolveOllie asks the login shell where it finds "ollie" now.
func resolveOllie(ctx context.Context, c *tunnel.Client, dl Deadlines) (state, path string, err error) {
	rctx, cancel := Within(ctx, dl.ForStep())
	defer cancel()
	out, err := c.RunLimit(rctx, Sh(resolveScript), nil, MaxSmallReply)
	if err != nil {
		return "", "", RemoteError("asking the login shell for ollie", err)
	}
	state, path = parseFound(string(out))
	return state, path, nil
}

// maxHostLines bounds how many lines of a host's account a note takes.
const maxHostLines = 8

// hostLines are a host's lines as a note may hold them: a few, each one
// line, made safe and clipped.
func hostLines(ls []string) []string {
	var out []string
	for i, l := range ls {
		if i == maxHostLines {
			out = append(out, fmt.Sprintf("(%d more)", len(ls)-i))
			break
		}
		out = append(out, termsafe.Field(l, MaxHostMessage))
	}
	return out
}

func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func HumanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// RemoteError says what failed on the host in its own words, without the
// script ollie-remote sent, which means nothing to the user.
func RemoteError(what string, err error) error {
	var (
		ee *tunnel.ExitError
		st *stepTimeout
		oe *tunnel.OutputError
	)
	switch {
	case errors.As(err, &st):
		return fmt.Errorf("%s: %w", what, st)
	case errors.As(err, &oe):
		return fmt.Errorf("%s: the host sent more than %s of output; stopped", what, HumanBytes(oe.Limit))
	case !errors.As(err, &ee):
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := strings.TrimSpace(string(ee.Stderr))
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", ee.Status)
	}
	if ee.Signal != "" {
		msg += " (killed by SIG" + ee.Signal + ")"
	}
	// The host's words: one line, made safe and clipped wherever the
	// error is shown.
	return fmt.Errorf("%s: %s", what, termsafe.Field(msg, MaxHostMessage))
}

// MaxHostMessage bounds a line of a host's words shown under its name.
const MaxHostMessage = 4096

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
