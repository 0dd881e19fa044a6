package deploy

// Deploying to a host that has only the appliance listener (appliance): no
// OpenSSH, so no /bin/sh to run the probe script and no filesystem SFTP
// (the listener's sftp subsystem serves the namespace). The listener runs
// a few "olliesrv ..." execs for an admin key instead, and this file is
// both halves of them:
//
//	olliesrv install probe [VERSION...]   the platform, home and manifest, as JSON
//	olliesrv install receive ROOT < TAR   uploads, to temporary names only
//	olliesrv install commit < PLAN        as over OpenSSH (Plan.Appliance set)
//	olliesrv install backends [desktop]   the backends file, from stdin
//	olliesrv restart                      the daemon and listener re-exec the current binary
//
// The files travel as a tar stream on one exec's stdin: one round trip
// for any number of files, where SFTP costs an open and a close each.

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"ollie/internal/paths"
	"ollie/tunnel"
)

// Probe is what "olliesrv install probe" says of a listener-only host.
type Probe struct {
	OS       string    `json:"os"`
	Arch     string    `json:"arch"`
	Home     string    `json:"home"`
	Manifest *Manifest `json:"manifest"`
}

// Root is where deploy installs under a home.
func Root(home string) string { return filepath.Join(home, ".local", "share", "ollie") }

// UserRoot is Root of this user's home.
func UserRoot() (string, error) {
	home, err := paths.Home()
	if err != nil {
		return "", err
	}
	return Root(home), nil
}

// Current is the olliesrv that deploy made current for this user
// (Root/current/olliesrv) when it is an executable file, else "".
func Current() string {
	root, err := UserRoot()
	if err != nil {
		return ""
	}
	exe := filepath.Join(root, "current", "olliesrv")
	if fi, err := os.Stat(exe); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0100 == 0 {
		return ""
	}
	return exe
}

// CurrentOrSelf is Current, else the running binary.
func CurrentOrSelf() (string, error) {
	if exe := Current(); exe != "" {
		return exe, nil
	}
	return os.Executable()
}

// probe describes this host as the running binary sees it.
func probe(versions []string) (*Probe, error) {
	home, err := paths.Home()
	if err != nil {
		return nil, err
	}
	m, err := ReadManifest(Root(home), versions)
	if err != nil {
		return nil, err
	}
	return &Probe{OS: runtime.GOOS, Arch: runtime.GOARCH, Home: home, Manifest: m}, nil
}

// Received is what "olliesrv install receive" took.
type Received struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// receive writes the regular files of the tar stream r under root. Only
// temporary names (".NAME.ollie-tmp-X") are taken, each created new, so
// a receive never touches a file in use: install commit checks and
// renames them, and removes what a failed receive left.
func receive(root string, r io.Reader) (*Received, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("root %q is not an absolute path", root)
	}
	if err := os.MkdirAll(root, 0755); err != nil {
		return nil, err
	}
	got := &Received{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, fmt.Errorf("reading the upload: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return got, fmt.Errorf("%q: only regular files are received", h.Name)
		}
		if !strings.Contains(path.Base(h.Name), ".ollie-tmp-") || !strings.HasPrefix(path.Base(h.Name), ".") {
			return got, fmt.Errorf("%q: not a temporary name", h.Name)
		}
		dst, err := inside(root, h.Name)
		if err != nil {
			return got, err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0755); err != nil {
			return got, err
		}
		// Checked again once made: the directories on the way may only now exist.
		if dst, err = inside(root, h.Name); err != nil {
			return got, err
		}
		mode := fs.FileMode(0600)
		if h.Mode&0100 != 0 {
			mode = 0700 // the new binary runs its own commit
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err != nil {
			return got, err
		}
		n, err := io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		got.Bytes += n
		if err != nil {
			os.Remove(dst)
			return got, fmt.Errorf("%s: %w", h.Name, err)
		}
		got.Files++
	}
}

// Backend files deploy may write in the host's configuration directory:
// the host's own, and the desktop's route (ollie-remote up -model-via).
var backendFiles = map[string]string{"": "backends.json", "desktop": "backends.desktop.json"}

// maxBackends bounds a backends file.
const maxBackends = 1 << 20

// writeBackends replaces the named backends file with r's JSON (0600: it
// may hold an API key).
func writeBackends(which string, r io.Reader) (string, error) {
	name, ok := backendFiles[which]
	if !ok {
		return "", fmt.Errorf("no backends file %q (desktop, or none for backends.json)", which)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBackends+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxBackends {
		return "", fmt.Errorf("%s: more than %d bytes", name, maxBackends)
	}
	if !json.Valid(b) {
		return "", fmt.Errorf("%s: not valid JSON", name)
	}
	dir, ok := paths.UserDir("")
	if !ok {
		return "", errors.New("no home directory for ~/.config/ollie")
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return "", err
	}
	file := filepath.Join(dir, name)
	return file, paths.WriteFileAtomic(file, b, 0600)
}

// The desktop half.

// pushAppliance is PushWith for a host whose SSH server is the appliance
// listener.
func pushAppliance(ctx context.Context, c *tunnel.Client, b *Bundle, o Options, res *Result) error {
	dl, progress := o.Deadlines, o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	args := []string{"olliesrv", "install", "probe"}
	for _, v := range sortedKeys(versionSet(b)) {
		args = append(args, v)
	}
	pctx, cancel := Within(ctx, dl.ForStep())
	out, err := c.RunLimit(pctx, strings.Join(args, " "), nil, maxReport)
	cancel()
	if err != nil {
		return RemoteError("probing the listener", err)
	}
	var p Probe
	if err := json.Unmarshal(out, &p); err != nil || p.Manifest == nil {
		return fmt.Errorf("probing the listener: unexpected answer %q", clip(out))
	}
	plat := p.OS + "/" + p.Arch
	if !path.IsAbs(p.Home) || !validVersion(p.OS) || !validVersion(p.Arch) {
		return fmt.Errorf("probing the listener: unexpected answer %q", clip(out))
	}
	res.Platform = plat
	bin, ok := b.Bins[plat]
	if !ok {
		return fmt.Errorf("no olliesrv built for %s: build it with make cross PLATFORMS=%s", plat, plat)
	}
	root := path.Join(p.Home, ".local/share/ollie")
	ver := VersionOf(bin)
	res.Version = ver
	up, remove, helperVer := changes(b, bin, ver, p.Manifest, nil, true, false)
	newExe := path.Join(root, ver, "olliesrv")
	if len(up) == 0 && len(remove) == 0 && p.Manifest.Current == ver && p.Manifest.Daemon == newExe {
		res.Changed = []string{"up to date: no file sent"}
		keepDeployed(bin)
		return nil
	}
	if len(up)+len(remove) > 0 || p.Manifest.Current != ver {
		tr := &tarTransport{root: root}
		if _, err := commitFilesVia(ctx, c, tr, res, root, ver, helperVer, up, remove, o.Keep, dl, progress, true); err != nil {
			return err
		}
		keepDeployed(bin)
	}
	// The listener is the daemon: it restarts itself on the new binary
	// (sessions are durable and come back), which ends this connection.
	if p.Manifest.Daemon != newExe {
		progress("restarting the listener on " + ver)
		rctx, cancel := Within(ctx, dl.ForStep())
		// The command's channel may close unanswered as the listener
		// goes: the connection's end is the answer.
		_, err := c.RunLimit(rctx, "olliesrv restart", nil, MaxSmallReply)
		cancel()
		select {
		case <-c.Done():
			res.Changed = append(res.Changed, "restarted the listener on the new version")
		case <-time.After(dl.ForCommit()):
			if err != nil {
				return RemoteError("restarting the listener", err)
			}
			return fmt.Errorf("the listener did not restart within %v: restart olliesrv on the host", dl.ForCommit())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func versionSet(b *Bundle) map[string]bool {
	vs := map[string]bool{}
	for _, f := range b.Bins {
		vs[VersionOf(f)] = true
	}
	return vs
}

// changes are the uploads and removals that bring m to b, and the
// installed version whose olliesrv must commit them ("" for the new
// binary, or the one of this version); cold are the host's decompressors,
// appliance whether the listener serves the host, near whether the link
// to it is (link.go).
func changes(b *Bundle, bin LocalFile, ver string, m *Manifest, cold []string, appliance, near bool) (up []upload, remove []string, helperVer string) {
	if m.Versions[ver] != bin.SHA256 {
		var u upload
		u, helperVer = binaryUpload(bin, ver, m, cold, appliance, near)
		up = append(up, u)
	}
	for _, rel := range sortedKeys(b.Data) {
		f := b.Data[rel]
		if have, ok := m.Data[rel]; !ok || have.SHA256 != f.SHA256 || have.Mode != f.Mode {
			up = append(up, upload{src: f, want: f, path: "data/" + rel})
		}
	}
	for _, rel := range sortedKeys(m.Data) {
		if _, ok := b.Data[rel]; !ok {
			remove = append(remove, rel)
		}
	}
	return up, remove, helperVer
}

func clip(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

// tarTransport sends the files as one tar stream to "olliesrv install
// receive" and has the listener's olliesrv commit them.
type tarTransport struct{ root string }

func (t *tarTransport) send(ctx context.Context, c *tunnel.Client, up []upload, dl Deadlines, moved *atomic.Int64) (int64, error) {
	for i := range up {
		up[i].tmp = path.Join(path.Dir(up[i].path), "."+path.Base(up[i].path)+".ollie-tmp-"+RandomHex(6))
	}
	pr, pw := io.Pipe()
	var sent int64
	go func() {
		tw := tar.NewWriter(pw)
		for _, u := range up {
			mode := int64(0600)
			if u.runs {
				mode = 0700
			}
			if err := tw.WriteHeader(&tar.Header{Name: u.tmp, Mode: mode, Size: u.src.Size, Typeflag: tar.TypeReg}); err != nil {
				pw.CloseWithError(err)
				return
			}
			f, err := os.Open(u.src.Src)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			// The size was hashed with the bundle: a file that changed
			// since fails the tar's length check, and then the commit's hash.
			n, err := io.Copy(tw, &countingReader{r: f, n: moved, size: u.src.Size})
			f.Close()
			sent += n
			if err != nil {
				pw.CloseWithError(fmt.Errorf("%s: %w", u.src.Src, err))
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	out, err := c.RunLimit(ctx, "olliesrv install receive "+ShellQuote(t.root), pr, MaxSmallReply)
	pr.Close()
	if err != nil {
		return sent, RemoteError("uploading", err)
	}
	var got Received
	if err := json.Unmarshal(out, &got); err != nil || got.Files != len(up) {
		return sent, fmt.Errorf("uploading: the listener took %q of %d files", clip(out), len(up))
	}
	return sent, nil
}

func (t *tarTransport) commit(ctx context.Context, c *tunnel.Client, helper string, plan []byte, pre *upload) ([]byte, error) {
	return c.RunLimit(ctx, "olliesrv install commit", strings.NewReader(string(plan)), maxReport)
}
