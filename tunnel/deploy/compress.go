package deploy

// Sending the binary in fewer bytes. A cold host has no ollie to
// decompress with, so it gets the binary compressed for a decompressor its
// shell finds (zstd, xz or gzip, asked in the probe), or as it is where
// there is none. A host that has ollie gets it from its own olliesrv: a
// zstd patch against the version it runs (about 0.2 % of the binary after
// a small change) when this desktop still has that version, else zstd.
// A host over a near link (link.go) gets the binary as it is unless a
// patch is at hand. Whatever travels, the host checks the result's SHA-256
// before the switch, as for any file.
//
// What a version costs to compress is paid once per desktop, and while
// it is sent (artifact.go): the compressed forms, and the binaries
// deployed (the bases of later patches), are kept in
// $XDG_CACHE_HOME/ollie/deploy.

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"ollie/internal/paths"
)

// Encodings a binary travels in. The first three are decoded by the
// host's own programs before the commit; the last two by its olliesrv.
const (
	EncZstdCLI = "zstd-cli"
	EncXzCLI   = "xz-cli"
	EncGzipCLI = "gzip-cli"
	EncZstd    = "zstd"
	EncPatch   = "zstd-patch"
)

// coldOrder is the preference among a cold host's decompressors: the
// smallest first (zstd and xz are within 1 % of each other; gzip is a
// fifth larger).
var coldOrder = []struct{ program, enc, ext string }{
	{"zstd", EncZstdCLI, ".zst"},
	{"xz", EncXzCLI, ".xz"},
	{"gzip", EncGzipCLI, ".gz"},
}

// Decoders are what this olliesrv decodes in install commit: the
// manifest says so, and the desktop sends no other encoding to it.
var Decoders = []string{EncZstd, EncPatch}

// patchDictID names the base in a patch's frame.
const patchDictID = 1

// cacheDir is where compressed forms and deployed binaries are kept. With
// no cache directory of the user's, a fresh private one serves this run
// (made at the first need): a fixed name in /tmp is one another local
// user could make first, and fill.
var cacheDir = sync.OnceValue(func() string {
	if d, err := paths.CacheDir(); err == nil {
		return filepath.Join(d, "deploy")
	}
	if d, err := os.MkdirTemp("", "ollie-deploy-"); err == nil {
		return d
	}
	return "" // every use then fails to write, and deploys uncompressed
})

// compressedFor is bin compressed for a cold host's program, whole.
func compressedFor(bin LocalFile, enc string) (LocalFile, error) {
	art, err := compressing(bin, enc)
	if err != nil {
		return LocalFile{}, err
	}
	return art.wait()
}

// compressing is bin compressed for a cold host's program, started if no
// host needed it before.
func compressing(bin LocalFile, enc string) (*artifact, error) {
	ext := ""
	for _, c := range coldOrder {
		if c.enc == enc {
			ext = c.ext
		}
	}
	if enc == EncZstd {
		ext = ".zst"
	}
	if ext == "" {
		return nil, fmt.Errorf("no encoding %q", enc)
	}
	return cache.start(bin.SHA256[:16]+ext, func(w io.Writer) error {
		src, err := os.Open(bin.Src)
		if err != nil {
			return err
		}
		defer src.Close()
		var zw io.WriteCloser
		switch ext {
		case ".zst":
			zw, err = zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
		case ".xz":
			zw, err = xz.WriterConfig{DictCap: 8 << 20}.NewWriter(w)
		case ".gz":
			zw, err = kgzip.NewWriterLevel(w, kgzip.BestCompression)
		}
		if err != nil {
			return err
		}
		if _, err := io.Copy(zw, src); err != nil {
			return err
		}
		return zw.Close()
	})
}

// patchWindow is a zstd window that reaches from the end of a file of
// size n back into a base of size base.
func patchWindow(base, n int64) int {
	w := 1 << 20
	for int64(w) < base+n && w < zstd.MaxWindowSize {
		w <<= 1
	}
	return w
}

// patchFor is bin as a zstd patch against base.
func patchFor(base, bin LocalFile) (LocalFile, error) {
	return cache.get(base.SHA256[:16]+"-"+bin.SHA256[:16]+".zpatch", func(w io.Writer) error {
		old, err := os.ReadFile(base.Src)
		if err != nil {
			return err
		}
		cur, err := os.ReadFile(bin.Src)
		if err != nil {
			return err
		}
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression),
			zstd.WithEncoderDictRaw(patchDictID, old), zstd.WithWindowSize(patchWindow(int64(len(old)), int64(len(cur)))))
		if err != nil {
			return err
		}
		_, err = w.Write(enc.EncodeAll(cur, nil))
		return err
	})
}

// keptBinaries is how many deployed binaries the desktop keeps as bases.
const keptBinaries = 4

// kept holds a sync.Once per binary kept in a cache in this process:
// the hosts of one deploy finish together, and each copying the binary
// (13 MB, fsynced) was most of a new build's cold deploy on loopback.
var kept sync.Map

// baseCopies counts the binaries keepDeployed copied, for tests.
var baseCopies atomic.Int64

// keepDeployed keeps bin as a base for later patches.
func keepDeployed(bin LocalFile) {
	if cache.root() == "" {
		return
	}
	once, _ := kept.LoadOrStore(cache.root()+"\x00"+bin.SHA256, &sync.Once{})
	once.(*sync.Once).Do(func() { keepBase(bin) })
}

func keepBase(bin LocalFile) {
	dir := filepath.Join(cache.root(), "bin")
	p := filepath.Join(dir, bin.SHA256)
	if _, err := os.Stat(p); err == nil {
		now := time.Now()
		os.Chtimes(p, now, now) // the newest kept
		return
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return
	}
	b, err := os.ReadFile(bin.Src)
	if err != nil {
		return
	}
	baseCopies.Add(1)
	if paths.WriteFileAtomic(p, b, 0600) != nil {
		return
	}
	ents, _ := os.ReadDir(dir)
	type kept struct {
		name string
		mod  int64
	}
	var ks []kept
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && len(e.Name()) == 64 {
			ks = append(ks, kept{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].mod > ks[j].mod })
	for _, k := range ks[min(len(ks), keptBinaries):] {
		os.Remove(filepath.Join(dir, k.name))
	}
}

// deployedBinary is the binary this desktop deployed whose SHA-256 is
// sum, if it still has it.
func deployedBinary(sum string) (LocalFile, bool) {
	if _, err := hex.DecodeString(sum); err != nil || len(sum) != 64 {
		return LocalFile{}, false
	}
	if cache.root() == "" {
		return LocalFile{}, false
	}
	f, err := hashFile(filepath.Join(cache.root(), "bin", sum))
	if err != nil || f.SHA256 != sum {
		return LocalFile{}, false
	}
	return f, true
}

// binaryUpload is how bin goes to a host with manifest m and the cold
// decompressors its shell found: the upload, and the version whose
// installed olliesrv must commit it ("" for the new binary itself). Over
// the listener (appliance) the listener's own olliesrv, which wrote m,
// commits whatever is sent. Over a near link (see link.go) the binary goes
// as it is unless a patch is at hand: compressing it, and decompressing
// it on the host, costs more there than the bytes it saves. Elsewhere it
// goes compressed, streamed from the encoder while that runs (the
// listener's tar needs each file's size first: it waits for the whole).
func binaryUpload(bin LocalFile, ver string, m *Manifest, cold []string, appliance, near bool) (u upload, helperVersion string) {
	u = upload{src: bin, want: bin, path: ver + "/olliesrv", runs: true}
	decodes := func(enc string) bool { return slices.Contains(m.Decoders, enc) }
	if m.Current != "" && decodes(EncPatch) && validVersion(m.Current) {
		if base, ok := deployedBinary(m.Versions[m.Current]); ok {
			if p, err := patchFor(base, bin); err == nil {
				u.src, u.enc, u.base = p, EncPatch, m.Current
				return u, m.Current
			}
		}
	}
	if near {
		return u, ""
	}
	compressed := func(enc string) bool {
		art, err := compressing(bin, enc)
		if err != nil {
			return false
		}
		if f, ok := art.whole(); ok {
			u.src = f
			return true
		}
		if appliance {
			f, err := art.wait()
			if err == nil {
				u.src = f
			}
			return err == nil
		}
		u.src, u.stream = LocalFile{}, art
		return true
	}
	if decodes(EncZstd) && (appliance || validVersion(m.Current) && m.Versions[m.Current] != "") {
		if compressed(EncZstd) {
			u.enc = EncZstd
			return u, m.Current
		}
	}
	for _, c := range coldOrder {
		if slices.Contains(cold, c.program) && compressed(c.enc) {
			u.enc, u.program = c.enc, c.program
			return u, ""
		}
	}
	return u, ""
}

// Host side: install commit decodes a file that came encoded.

// decodeUpload writes what the upload at tmp decodes to beside it and
// returns its path; root holds the versions a patch's base is one of.
func decodeUpload(root, tmp string, f PlannedFile) (string, error) {
	in, err := os.OpenFile(tmp, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer in.Close()
	var r io.Reader
	switch f.Encoding {
	case EncZstd:
		d, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return "", err
		}
		defer d.Close()
		r = d
	case EncPatch:
		if !validVersion(f.Base) {
			return "", fmt.Errorf("bad patch base %q", f.Base)
		}
		bp, err := inside(root, f.Base+"/olliesrv")
		if err != nil {
			return "", err
		}
		base, err := os.ReadFile(bp)
		if err != nil {
			return "", fmt.Errorf("the patch's base: %w", err)
		}
		d, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderDictRaw(patchDictID, base),
			zstd.WithDecoderMaxWindow(uint64(zstd.MaxWindowSize)))
		if err != nil {
			return "", err
		}
		defer d.Close()
		r = d
	default:
		return "", fmt.Errorf("unknown encoding %q", f.Encoding)
	}
	out, err := os.CreateTemp(filepath.Dir(tmp), "."+filepath.Base(f.Path)+".ollie-tmp-decoded-*")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out.Name())
		return "", err
	}
	return out.Name(), nil
}
