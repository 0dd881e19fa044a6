// Package deploy puts ollie on a host over SSH: one wire format, and both
// halves of it. The desktop copies files over SFTP to temporary names;
// everything that must be atomic or must read the host's disk (hashing,
// fsync, rename, the current link, pruning, the ollie command, restarting
// the daemon) happens on the host, in one exec of "olliesrv install", so a
// deploy costs few round trips and needs no tool on the host but this
// binary. The desktop half trusts the host's answers only as data. A host
// served by ollie's own SSH listener has no shell and no file SFTP: there
// the same steps are the listener's olliesrv commands (appliance.go).
package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"ollie/host/daemon"
	"ollie/internal/paths"
)

// Manifest is what a host has: the versions under the root with the
// hash of each one's binary, where current points, the data files, and
// whether the ollie command is installed.
type Manifest struct {
	Root      string            `json:"root"`
	Current   string            `json:"current"`   // the version current points to
	Versions  map[string]string `json:"versions"`  // version -> sha256 of its olliesrv ("" when missing)
	Data      map[string]File   `json:"data"`      // path under data/ -> file
	Installed bool              `json:"installed"` // ~/.local/bin/ollie and the login shell's PATH line are in place
	Daemon    string            `json:"daemon"`    // the running daemon's binary, "" when none
	Shell     string            `json:"shell"`     // the user's login shell, "" when unknown
	// Decoders are the encodings this host's olliesrv decodes in a
	// commit (compress.go); an older olliesrv says none.
	Decoders []string `json:"decoders,omitempty"`
}

// File is one file's content hash and permission bits.
type File struct {
	SHA256 string      `json:"sha256"`
	Mode   fs.FileMode `json:"mode"`
}

// Plan is what ollie-remote asks a host to do once the files are
// uploaded under temporary names.
type Plan struct {
	Root    string        `json:"root"`
	Version string        `json:"version"` // becomes current
	Files   []PlannedFile `json:"files"`   // committed in order
	Remove  []string      `json:"remove"`  // paths under data/ to delete
	Keep    int           `json:"keep"`    // versions kept, current included
	Restart bool          `json:"restart"` // restart a daemon running another version
	// Appliance: the host is served by the appliance listener, whose
	// shell is ollie's: no ollie command or login-shell edits.
	Appliance bool `json:"appliance,omitempty"`
}

// PlannedFile is an uploaded file: Tmp becomes Path (both relative to the
// root) once its content hashes to SHA256.
type PlannedFile struct {
	Tmp    string      `json:"tmp"`
	Path   string      `json:"path"`
	SHA256 string      `json:"sha256"`
	Mode   fs.FileMode `json:"mode"`
	// Encoding, when set, is how Tmp is encoded (one of Decoders); Base
	// the version whose olliesrv a patch applies to.
	Encoding string `json:"encoding,omitempty"`
	Base     string `json:"base,omitempty"`
}

// Report says what changed on the host.
type Report struct {
	Changed []string `json:"changed"`
	Bad     []string `json:"bad,omitempty"` // files whose upload arrived damaged: not committed
	Shell   string   `json:"shell,omitempty"`
	// Problems are the login shell's files that could not be edited, and
	// why: ssh HOST ollie may then not find the command.
	Problems []string `json:"problems,omitempty"`
}

const installUsage = `usage: olliesrv install manifest ROOT [VERSION...]   describe what ROOT holds, as JSON
       olliesrv install commit < PLAN.json           commit uploaded files (used by ollie-remote deploy)
       olliesrv install probe [VERSION...]           this host's platform, home and manifest, as JSON
       olliesrv install receive ROOT < FILES.tar     take uploads to temporary names under ROOT
       olliesrv install backends [desktop] < JSON    replace ~/.config/ollie/backends[.desktop].json
`

// Install is "olliesrv install": the host half, its JSON on stdin and stdout.
func Install(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, installUsage)
		return 2
	}
	var out any
	var err error
	switch args[0] {
	case "manifest":
		if len(args) < 2 {
			fmt.Fprint(stderr, installUsage)
			return 2
		}
		out, err = ReadManifest(args[1], args[2:])
	case "commit":
		var plan Plan
		if err := json.NewDecoder(stdin).Decode(&plan); err != nil {
			fmt.Fprintf(stderr, "olliesrv install commit: reading the plan: %v\n", err)
			return 2
		}
		out, err = Commit(plan)
	case "probe":
		out, err = probe(args[1:])
	case "receive":
		if len(args) != 2 {
			fmt.Fprint(stderr, installUsage)
			return 2
		}
		out, err = receive(args[1], stdin)
	case "backends":
		if len(args) > 2 {
			fmt.Fprint(stderr, installUsage)
			return 2
		}
		var file string
		file, err = writeBackends(strings.Join(args[1:], ""), stdin)
		out = map[string]string{"file": file}
	default:
		fmt.Fprint(stderr, installUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv install: %v\n", err)
		return 1
	}
	json.NewEncoder(stdout).Encode(out)
	return 0
}

func ReadManifest(root string, versions []string) (*Manifest, error) {
	m := &Manifest{Root: root, Versions: map[string]string{}, Data: map[string]File{}}
	if cur, err := os.Readlink(filepath.Join(root, "current")); err == nil {
		m.Current = filepath.Base(cur)
	}
	for _, v := range append(versions, m.Current) {
		if _, done := m.Versions[v]; done || v == "" || !validVersion(v) {
			continue
		}
		m.Versions[v] = binarySHA256(filepath.Join(root, v, "olliesrv"))
	}
	data := filepath.Join(root, "data")
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() || strings.Contains(d.Name(), ".ollie-tmp-") {
			return nil
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		m.Data[filepath.ToSlash(rel)] = File{SHA256: sum, Mode: fi.Mode().Perm()}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.Shell = loginShell()
	m.Installed = ollieCommandInstalled(root, m.Shell)
	m.Daemon = runningDaemonExe()
	m.Decoders = Decoders
	return m, nil
}

// binarySHA256 is a version's binary's hash: the one install commit
// verified, kept beside it, while the file's size and mtime are unchanged
// (as rsync's quick check trusts them), else hashed again. Hashing the
// binary on every deploy was most of a warm deploy's time. "" when missing.
func binarySHA256(bin string) string {
	fi, err := os.Stat(bin)
	if err != nil {
		return ""
	}
	stamp := fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
	cache := filepath.Join(filepath.Dir(bin), ".olliesrv.sha256")
	if b, err := os.ReadFile(cache); err == nil {
		if sum, rest, ok := strings.Cut(strings.TrimSpace(string(b)), " "); ok && rest == stamp {
			return sum
		}
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return ""
	}
	paths.WriteFileAtomic(cache, []byte(sum+" "+stamp+"\n"), 0644)
	return sum
}

// validVersion keeps a version name to one plain path element.
func validVersion(v string) bool {
	return v != "" && v != "." && v != ".." && !strings.ContainsAny(v, "/\x00")
}

func fileSHA256(path string) (string, error) {
	f, err := hashFile(path)
	return f.SHA256, err
}

// inside joins rel to root and refuses anything that leaves root: an
// absolute path, "..", or a directory on the way that is a symlink
// leading out (the file itself is never followed: it is renamed, removed
// or opened with O_NOFOLLOW).
func inside(root, rel string) (string, error) {
	bad := fmt.Errorf("%q is not a path inside %s", rel, root)
	if filepath.IsAbs(filepath.FromSlash(rel)) {
		return "", bad
	}
	p := filepath.Join(root, filepath.FromSlash(rel))
	if !under(root, p) {
		return "", bad
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return p, nil // nothing there yet to lead anywhere; renaming into it fails
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	if dir != realRoot && !under(realRoot, dir) {
		return "", bad
	}
	return p, nil
}

// under reports whether p lies below dir.
func under(dir, p string) bool {
	r, err := filepath.Rel(dir, p)
	return err == nil && r != "." && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

func Commit(plan Plan) (*Report, error) {
	if !filepath.IsAbs(plan.Root) || !validVersion(plan.Version) {
		return nil, fmt.Errorf("bad plan: root %q, version %q", plan.Root, plan.Version)
	}
	if plan.Appliance {
		// Over the listener, install commit serves only deploy's own root.
		if root, err := UserRoot(); err != nil || filepath.Clean(plan.Root) != root {
			return nil, fmt.Errorf("bad plan: root %q is not ~/.local/share/ollie", plan.Root)
		}
	}
	rep := &Report{}
	checked, err := checkFiles(plan)
	if err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	for i, f := range plan.Files {
		c := checked[i]
		if !c.ok {
			rep.Bad = append(rep.Bad, f.Path)
			continue
		}
		if err := os.Rename(c.tmp, c.dst); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if filepath.Base(c.dst) == "olliesrv" {
			if fi, err := os.Stat(c.dst); err == nil {
				paths.WriteFileAtomic(filepath.Join(filepath.Dir(c.dst), ".olliesrv.sha256"),
					fmt.Appendf(nil, "%s %d %d\n", f.SHA256, fi.Size(), fi.ModTime().UnixNano()), 0644)
			}
		}
		dirs[filepath.Dir(c.dst)] = true
	}
	data := filepath.Join(plan.Root, "data")
	for _, rel := range plan.Remove {
		p, err := inside(data, rel)
		if err != nil {
			return nil, err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		dirs[filepath.Dir(p)] = true
		rep.Changed = append(rep.Changed, "removed data/"+rel+" (no longer in the deployed data)")
	}
	removeLeftovers(plan.Root)
	removeEmptyDirs(data)
	var wg sync.WaitGroup
	for d := range dirs {
		wg.Go(func() { paths.SyncDir(d) }) // best effort: the rename is done either way
	}
	wg.Wait()
	if len(rep.Bad) > 0 {
		// A damaged binary or data file must not become current: the
		// caller uploads those again and commits once more.
		return rep, nil
	}
	if changed, err := switchCurrent(plan.Root, plan.Version); err != nil {
		return nil, err
	} else if changed != "" {
		rep.Changed = append(rep.Changed, changed)
	}
	rep.Changed = append(rep.Changed, pruneVersions(plan.Root, plan.Version, plan.Keep)...)
	if !plan.Appliance {
		rep.Shell = loginShell()
		installed, problems, err := installOllieCommand(plan.Root, rep.Shell)
		if err != nil {
			return nil, err
		}
		rep.Changed = append(rep.Changed, installed...)
		rep.Problems = problems
	}
	if plan.Restart {
		msg, err := restartIfStale(filepath.Join(plan.Root, plan.Version, "olliesrv"))
		if err != nil {
			return nil, err
		}
		if msg != "" {
			rep.Changed = append(rep.Changed, msg)
		}
	}
	return rep, nil
}

// checked is a planned file made ready for its rename: ok when its
// content is the plan's, and durable.
type checked struct {
	tmp, dst string
	ok       bool
}

// checkWorkers is how many files a commit checks at once. Each check ends
// in an fsync, and concurrent fsyncs share the file system's journal
// commits: one after the other, the 41 files of a deploy waited 100 to
// 200 ms on a busy host.
const checkWorkers = 8

// checkFiles decodes, hashes and fsyncs every file of plan, several at
// once, and says which are ready to be renamed in the plan's order. A
// file whose content is not the plan's is removed and not ok.
func checkFiles(plan Plan) ([]checked, error) {
	out := make([]checked, len(plan.Files))
	errs := make([]error, len(plan.Files))
	sem := make(chan struct{}, checkWorkers)
	var wg sync.WaitGroup
	for i, f := range plan.Files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = checkFile(plan.Root, f)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", plan.Files[i].Path, err)
		}
	}
	return out, nil
}

// checkFile makes one planned file ready: decoded if it came encoded,
// checked against its hash, given its mode and fsynced.
func checkFile(root string, f PlannedFile) (checked, error) {
	tmp, err := inside(root, f.Tmp)
	if err != nil {
		return checked{}, err
	}
	dst, err := inside(root, f.Path)
	if err != nil {
		return checked{}, err
	}
	if f.Encoding != "" {
		plain, err := decodeUpload(root, tmp, f)
		os.Remove(tmp)
		if err != nil {
			// Damaged on the way, most likely: sent again.
			return checked{}, nil
		}
		tmp = plain
	}
	ok, err := syncChecked(tmp, f.SHA256, f.Mode)
	return checked{tmp: tmp, dst: dst, ok: ok}, err
}

// syncChecked checks tmp's content and makes it durable with mode. A
// mismatch removes tmp and reports false.
func syncChecked(tmp, want string, mode fs.FileMode) (bool, error) {
	// Read-only: tmp may be the running binary, which cannot be opened
	// for writing; fsync and fchmod work on any descriptor. Never through
	// a symlink: that would hash, chmod and commit a file elsewhere.
	f, err := os.OpenFile(tmp, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return false, fmt.Errorf("the upload %s is not a regular file", tmp)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	if hex.EncodeToString(h.Sum(nil)) != want {
		os.Remove(tmp)
		return false, nil
	}
	return true, nil
}

// removeLeftovers removes what interrupted uploads left: every upload of
// this plan is committed or removed by now.
func removeLeftovers(root string) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(d.Name(), ".ollie-tmp-") {
			os.Remove(p)
		}
		return nil
	})
}

// removeEmptyDirs removes directories under data left empty by removals.
func removeEmptyDirs(root string) {
	var dirs []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i]) // fails, as it should, unless empty
	}
}

// switchCurrent points root/current at version with a rename, so that a
// reader sees the old link or the new one and never none.
func switchCurrent(root, version string) (string, error) {
	link := filepath.Join(root, "current")
	old, _ := os.Readlink(link)
	if old == version {
		return "", nil
	}
	tmp := filepath.Join(root, ".current.tmp")
	os.Remove(tmp)
	if err := os.Symlink(version, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, link); err != nil {
		return "", err
	}
	paths.SyncDir(root)
	if old == "" {
		return "current → " + version, nil
	}
	return "current " + filepath.Base(old) + " → " + version, nil
}

// pruneVersions keeps the newest keep versions, the current one always
// among them, and removes the rest with anything a broken upload left.
func pruneVersions(root, current string, keep int) []string {
	if keep < 1 {
		keep = 3
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	type version struct {
		name string
		mod  time.Time
	}
	var vs []version
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "data" || e.Name() == current || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), "olliesrv")); err != nil {
			if _, err := os.Stat(filepath.Join(root, e.Name())); err == nil && !hasTmpOnly(filepath.Join(root, e.Name())) {
				continue // not ours
			}
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		vs = append(vs, version{e.Name(), fi.ModTime()})
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].mod.After(vs[j].mod) })
	var out []string
	for i, v := range vs {
		if i < keep-1 {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, v.name)); err == nil {
			out = append(out, "removed old version "+v.name)
		}
	}
	return out
}

// hasTmpOnly reports a directory holding only upload leftovers.
func hasTmpOnly(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !strings.Contains(e.Name(), ".ollie-tmp-") {
			return false
		}
	}
	return true
}

// The ollie command is a script in ~/.local/bin that runs the current
// binary as the client and starts the daemon on first use; the login
// shell's files put the directory on PATH for "ssh HOST ollie" (shells.go).

func ollieScript(root string) string {
	return "#!/bin/sh\n" + ollieMark + "\nexec " + ShellQuote(filepath.Join(root, "current", "olliesrv")) + " ollie -start \"$@\"\n"
}

// commandEdits are the files that put ~/.local/bin on PATH for this
// user's login shell.
func commandEdits(home, shell string) []rcEdit {
	return rcEdits(home, paths.XDG("XDG_CONFIG_HOME"), kindOf(shell))
}

func ollieCommandInstalled(root, shell string) bool {
	home, err := paths.Home()
	if err != nil {
		return false
	}
	if b, err := os.ReadFile(filepath.Join(home, ".local", "bin", "ollie")); err != nil || string(b) != ollieScript(root) {
		return false
	}
	for _, e := range commandEdits(home, shell) {
		if !e.upToDate() {
			return false
		}
	}
	return true
}

// installOllieCommand installs the script and edits the login shell's
// files. A file that cannot be edited is not an error: the command is
// still there by its path, and problems says why ssh HOST ollie may not
// find it.
func installOllieCommand(root, shell string) (changed, problems []string, err error) {
	home, err := paths.Home()
	if err != nil {
		return nil, nil, err
	}
	bin := filepath.Join(home, ".local", "bin")
	if err := os.MkdirAll(bin, 0755); err != nil {
		return nil, nil, err
	}
	cmd, script := filepath.Join(bin, "ollie"), ollieScript(root)
	if b, err := os.ReadFile(cmd); err != nil || string(b) != script {
		if err := paths.WriteFileAtomic(cmd, []byte(script), 0755); err != nil {
			return nil, nil, err
		}
		changed = append(changed, "installed ~/.local/bin/ollie (runs "+filepath.Join(root, "current", "olliesrv")+" ollie)")
	}
	for _, e := range commandEdits(home, shell) {
		did, err := e.apply()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if did != "" {
			changed = append(changed, did)
		}
	}
	return changed, problems, nil
}

// restartIfStale restarts a running daemon whose binary is not exe, so that
// an upgrade takes effect; sessions are durable and come back.
func restartIfStale(exe string) (string, error) {
	running := runningDaemonExe()
	if running == "" || running == exe {
		return "", nil
	}
	if err := daemon.Stop(30 * time.Second); err != nil {
		return "", fmt.Errorf("stopping the old daemon: %w", err)
	}
	pid, err := daemon.StartDetached(exe, 15*time.Second)
	if err != nil {
		return "", fmt.Errorf("starting the new daemon: %w", err)
	}
	return fmt.Sprintf("restarted olliesrv on the new version (pid %d)", pid), nil
}

// runningDaemonExe is the binary of the daemon holding the namespace lock,
// or "" when none runs.
func runningDaemonExe() string {
	pid := daemon.PID()
	if pid == 0 {
		return ""
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	if slices.Contains([]string{"", "/"}, exe) {
		return ""
	}
	return exe
}
