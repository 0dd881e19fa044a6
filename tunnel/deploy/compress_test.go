package deploy

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"ollie/internal/lab"
)

// compressFixture points the desktop's cache at a private directory and
// writes two "binaries" that differ in a few bytes, as two builds do.
func compressFixture(t *testing.T) (old, cur LocalFile) {
	t.Helper()
	cache = &artifacts{dir: t.TempDir(), once: map[string]*artifact{}}
	t.Cleanup(waitArtifacts) // before the cache's directory goes
	dir := t.TempDir()
	body := make([]byte, 3<<20)
	rand.Read(body[:1<<20]) // incompressible, as code mostly is not: the patch must find it in the base
	old1 := append(slices.Clone(body), []byte("version one")...)
	cur1 := append(slices.Clone(body), []byte("version two")...)
	for name, b := range map[string][]byte{"old": old1, "cur": cur1} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0755); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if old, err = hashFile(filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	if cur, err = hashFile(filepath.Join(dir, "cur")); err != nil {
		t.Fatal(err)
	}
	return old, cur
}

// TestBinaryUploadChoice: a host whose olliesrv decodes patches, and whose
// running version this desktop deployed, gets a patch; one this desktop
// never deployed gets zstd for its olliesrv; a cold host gets the
// binary for the best decompressor its shell found, else as it is.
func TestBinaryUploadChoice(t *testing.T) {
	old, cur := compressFixture(t)
	withOllie := &Manifest{Current: "oldver", Versions: map[string]string{"oldver": old.SHA256}, Decoders: Decoders}

	u, helper := binaryUpload(cur, "newver", withOllie, []string{"gzip"}, false, false)
	if u.enc != EncZstd || helper != "oldver" {
		t.Errorf("a host with ollie, its version unknown here: %q by %q, want zstd by oldver", u.enc, helper)
	}
	keepDeployed(old)
	u, helper = binaryUpload(cur, "newver", withOllie, []string{"gzip"}, false, false)
	if u.enc != EncPatch || u.base != "oldver" || helper != "oldver" {
		t.Fatalf("a host running what this desktop deployed: %q against %q by %q, want a patch against oldver", u.enc, u.base, helper)
	}
	if u.src.Size > cur.Size/100 || u.want != cur {
		t.Errorf("the patch is %d bytes for a %d-byte binary (want ≤ 1%%), or it does not end as the binary", u.src.Size, cur.Size)
	}
	older := &Manifest{Current: "oldver", Versions: map[string]string{"oldver": old.SHA256}} // says no decoders
	if u, helper = binaryUpload(cur, "newver", older, []string{"xz", "gzip"}, false, false); u.enc != EncXzCLI || u.program != "xz" || helper != "" {
		t.Errorf("an olliesrv that decodes nothing, xz and gzip on the host: %q by %q (%q)", u.enc, u.program, helper)
	}
	if u, helper = binaryUpload(cur, "newver", &Manifest{Decoders: Decoders}, nil, true, false); u.enc != EncZstd {
		t.Errorf("a listener with no version installed yet: %q (helper %q), want zstd for the listener's olliesrv", u.enc, helper)
	}
	for cold, want := range map[string]string{"zstd xz gzip": EncZstdCLI, "gzip": EncGzipCLI, "": ""} {
		u, helper = binaryUpload(cur, "newver", &Manifest{}, strings.Fields(cold), false, false)
		if u.enc != want || helper != "" {
			t.Errorf("a cold host with %q: %q (helper %q), want %q", cold, u.enc, helper, want)
		}
		if want == "" && u.src != cur {
			t.Errorf("a cold host with no decompressor is sent %+v, want the binary as it is", u.src)
		}
	}
}

// waitArtifacts waits for the compressed forms being made.
func waitArtifacts() {
	cache.mu.Lock()
	arts := make([]*artifact, 0, len(cache.once))
	for _, a := range cache.once {
		arts = append(arts, a)
	}
	cache.mu.Unlock()
	for _, a := range arts {
		a.wait()
	}
}

// TestBinaryUploadNear: over a near link the binary goes as it is, where
// a cold host's zstd or a host's olliesrv would have unpacked it; a patch
// still goes as a patch.
func TestBinaryUploadNear(t *testing.T) {
	old, cur := compressFixture(t)
	unknown := &Manifest{Current: "oldver", Versions: map[string]string{"oldver": old.SHA256}, Decoders: Decoders}
	if u, helper := binaryUpload(cur, "newver", &Manifest{}, []string{"zstd", "gzip"}, false, true); u.enc != "" || u.src != cur || helper != "" {
		t.Errorf("a near cold host with zstd: %q from %+v by %q, want the binary as it is, committing itself", u.enc, u.src, helper)
	}
	if u, helper := binaryUpload(cur, "newver", unknown, nil, false, true); u.enc != "" || u.src != cur || helper != "" {
		t.Errorf("a near host with ollie: %q from %+v by %q, want the binary as it is, committing itself", u.enc, u.src, helper)
	}
	keepDeployed(old)
	if u, _ := binaryUpload(cur, "newver", unknown, nil, false, true); u.enc != EncPatch {
		t.Errorf("a near host running what this desktop deployed: %q, want a patch", u.enc)
	}
}

// TestColdDecompressors: what deploy's commit script runs on a cold host
// (the host's own zstd, xz or gzip) gives back the binary, byte for byte.
func TestColdDecompressors(t *testing.T) {
	_, cur := compressFixture(t)
	want, _ := os.ReadFile(cur.Src)
	for _, c := range coldOrder {
		t.Run(c.program, func(t *testing.T) {
			_, err := exec.LookPath(c.program)
			lab.Need(t, err == nil, c.program+" (apt-get install zstd xz-utils gzip)")
			z, err := compressedFor(cur, c.enc)
			if err != nil {
				t.Fatal(err)
			}
			if z.Size >= cur.Size {
				t.Errorf("%s: %d bytes for %d", c.program, z.Size, cur.Size)
			}
			f, _ := os.Open(z.Src)
			defer f.Close()
			cmd := exec.Command(c.program, "-dc")
			cmd.Stdin = f
			got, err := cmd.Output()
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s -dc gave %d bytes (%v), want the binary's %d", c.program, len(got), err, len(want))
			}
		})
	}
}

// TestCommitDecodes: install commit decodes a zstd upload and a patch
// against an installed version, checks the result's hash, and reports a
// damaged one as bad (sent again) without committing it.
func TestCommitDecodes(t *testing.T) {
	old, cur := compressFixture(t)
	keepDeployed(old)
	root := installRoot(t)
	oldBytes, _ := os.ReadFile(old.Src)
	os.MkdirAll(filepath.Join(root, "v1"), 0755)
	os.WriteFile(filepath.Join(root, "v1", "olliesrv"), oldBytes, 0755)
	os.Symlink("v1", filepath.Join(root, "current"))
	m := &Manifest{Current: "v1", Versions: map[string]string{"v1": old.SHA256}, Decoders: Decoders}
	patch, _ := binaryUpload(cur, "v2", m, nil, false, false)
	zst, err := compressedFor(cur, EncZstd)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, enc, base string
		src             LocalFile
	}{{"patch", EncPatch, "v1", patch.src}, {"zstd", EncZstd, "", zst}} {
		t.Run(c.name, func(t *testing.T) {
			b, _ := os.ReadFile(c.src.Src)
			damaged := slices.Clone(b)
			damaged[len(damaged)/2] ^= 0xff
			for _, arrived := range [][]byte{damaged, b} {
				pf := installUpload(t, root, "v2/olliesrv", string(arrived), "")
				pf.SHA256, pf.Mode, pf.Encoding, pf.Base = cur.SHA256, 0755, c.enc, c.base
				rep, stderr, code := installCommitJSON(t, Plan{Root: root, Version: "v2", Keep: 3, Files: []PlannedFile{pf}})
				if code != 0 {
					t.Fatalf("commit: exit %d %s", code, stderr)
				}
				if bytes.Equal(arrived, damaged) {
					if !slices.Equal(rep.Bad, []string{"v2/olliesrv"}) || installCurrent(t, root) != "v1" {
						t.Errorf("a damaged %s: report %+v, current %q; want it bad and v1 current", c.name, rep, installCurrent(t, root))
					}
					continue
				}
				if got := sha256File(t, filepath.Join(root, "v2", "olliesrv")); got != cur.SHA256 || installCurrent(t, root) != "v2" {
					t.Errorf("the %s upload committed %s, current %q", c.name, got, installCurrent(t, root))
				}
				if l := installLeftovers(root); len(l) != 0 {
					t.Errorf("left behind: %v", l)
				}
			}
			os.Remove(filepath.Join(root, "current"))
			os.Symlink("v1", filepath.Join(root, "current"))
			os.RemoveAll(filepath.Join(root, "v2"))
		})
	}
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := hashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return f.SHA256
}

// TestKeepDeployedOnce: the hosts of one deploy, finishing together, keep
// the binary as a base once, not once each.
func TestKeepDeployedOnce(t *testing.T) {
	_, cur := compressFixture(t)
	before := baseCopies.Load()
	var wg sync.WaitGroup
	for range 9 {
		wg.Add(1)
		go func() { defer wg.Done(); keepDeployed(cur) }()
	}
	wg.Wait()
	if n := baseCopies.Load() - before; n != 1 {
		t.Errorf("nine hosts copied the binary %d times, want once", n)
	}
	if f, ok := deployedBinary(cur.SHA256); !ok || f.SHA256 != cur.SHA256 {
		t.Errorf("not kept: %+v", f)
	}
}
