package layout_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// sizeBudgets are the largest the two binaries may be, built as make
// build builds them (static, stripped, for this machine): issue 33's
// budgets. ollie-remote links no model client (12.0 MB at the last
// measure); olliesrv speaks Chat Completions through agent/backend's own
// wire types and openai-go's stream decoder, not openai-go's root package
// (whose init registers every type of the API: 31.0 MB before, 13.0 MB
// after). docs/benchmarks.md has the breakdown by module.
var sizeBudgets = map[string]int64{
	"ollie-remote": 15_000_000,
	"olliesrv":     20_000_000,
}

func TestBinarySize(t *testing.T) {
	root := moduleRoot(t)
	dir := t.TempDir()
	for name, budget := range sizeBudgets {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-buildvcs=false", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, b)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.1f MB (budget %.1f MB)", name, float64(fi.Size())/1e6, float64(budget)/1e6)
		if fi.Size() > budget {
			t.Errorf("%s is %d bytes, past its budget of %d: go test -v -run TestBinarySize ./internal/layout shows what it is made of (docs/benchmarks.md, binary size)", name, fi.Size(), budget)
		}
		if testing.Verbose() || fi.Size() > budget {
			t.Logf("%s, code and data by module (unstripped build, go tool nm):\n%s", name, byModule(t, root, name, dir))
		}
	}
}

// owner is the package path a symbol's name begins with, generic
// instantiations' type arguments left out; "" for the runtime's tables.
func owner(sym string) string {
	if strings.HasPrefix(sym, "go:") && !strings.HasPrefix(sym, "go:itab.") {
		return ""
	}
	for _, p := range []string{"type:", "go:itab.", "*", ".eq.", "("} {
		sym = strings.TrimPrefix(sym, p)
	}
	sym, _, _ = strings.Cut(sym, "[") // a generic's type arguments
	sym, _, _ = strings.Cut(sym, ",") // an itab's interface
	sym = strings.ReplaceAll(sym, "%2e", ".")
	if i := strings.Index(sym, ".("); i >= 0 {
		return sym[:i] // a method, whose name may hold another package's path
	}
	slash := strings.LastIndex(sym, "/")
	dot := strings.Index(sym[slash+1:], ".")
	if dot < 0 {
		return ""
	}
	return sym[:slash+1+dot]
}

// byModule is what each module adds to the text and data of cmd/name, in
// MB, the largest first: the figure docs/benchmarks.md reports.
func byModule(t *testing.T, root, name, dir string) string {
	t.Helper()
	out := filepath.Join(dir, name+".syms")
	cmd := exec.Command("go", "build", "-buildvcs=false", "-trimpath", "-o", out, "./cmd/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, b)
	}
	nm, err := exec.Command("go", "tool", "nm", "-size", out).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	sizes := map[string]int64{}
	var total int64
	sc := bufio.NewScanner(bytes.NewReader(nm))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.ContainsAny(f[2], "TtRrDd") {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		if n > 8<<20 {
			continue // the FIPS DRBG's buffer: zero pages, not in the file
		}
		by := "the runtime's tables (go:)"
		if pkg := owner(strings.Join(f[3:], " ")); pkg != "" {
			by = module(pkg)
		}
		sizes[by] += n
		total += n
	}
	names := make([]string, 0, len(sizes))
	for k := range sizes {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return sizes[names[i]] > sizes[names[j]] })
	var b strings.Builder
	for _, k := range names[:min(len(names), 12)] {
		fmt.Fprintf(&b, "  %6.2f MB %4.1f%%  %s\n", float64(sizes[k])/1e6, 100*float64(sizes[k])/float64(total), k)
	}
	fmt.Fprintf(&b, "  %6.2f MB         in all", float64(total)/1e6)
	return b.String()
}

// module names the module a package path belongs to: the standard
// library, ollie's own code, or host/owner/repo (its major version too).
func module(pkg string) string {
	switch first, _, _ := strings.Cut(pkg, "/"); {
	case first == "ollie":
		return "ollie"
	case first == "vendor" || !strings.Contains(first, "."):
		return "standard library"
	}
	parts := strings.Split(pkg, "/")
	n := min(len(parts), 3)
	if n < len(parts) && regexp.MustCompile(`^v[0-9]+$`).MatchString(parts[n]) {
		n++
	}
	return strings.Join(parts[:n], "/")
}
