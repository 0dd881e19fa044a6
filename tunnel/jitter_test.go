package tunnel

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestJittered: waits stay within [d/2, d] and are not all the same, so
// that hosts refused together retry apart.
func TestJittered(t *testing.T) {
	d := 4 * time.Second
	seen := map[time.Duration]bool{}
	for range 200 {
		w := jittered(d)
		if w < d/2 || w > d {
			t.Fatalf("jittered(%v) = %v, outside [%v, %v]", d, w, d/2, d)
		}
		seen[w] = true
	}
	if len(seen) < 50 {
		t.Errorf("200 waits took only %d values: not jittered", len(seen))
	}
}

// TestPermanentNoSuchHost: a name that does not resolve is not retried
// (a fleet's typo fails at once); a resolver that times out is.
func TestPermanentNoSuchHost(t *testing.T) {
	nx := fmt.Errorf("tunnel: web9: %w", &net.DNSError{Err: "no such host", Name: "web9", IsNotFound: true})
	if !Permanent(nx) {
		t.Error("a name that does not resolve is retried")
	}
	if Permanent(fmt.Errorf("dial: %w", &net.DNSError{Err: "i/o timeout", Name: "web9", IsTimeout: true})) {
		t.Error("a resolver's time-out is taken as permanent")
	}
}

// TestConfigReadAgainWhenChanged: the parsed config is kept by content:
// an edit of the file is seen at the next Resolve.
func TestConfigReadAgainWhenChanged(t *testing.T) {
	f := filepath.Join(t.TempDir(), "config")
	for i, port := range []string{"2201", "2202", "2201"} {
		os.WriteFile(f, []byte("Host web1\n  Port "+port+"\n"), 0600)
		tg, err := Resolve("web1", Options{ConfigFile: f})
		if err != nil || strconv.Itoa(tg.Port) != port {
			t.Errorf("edit %d: port %v (%v), want %s", i, tg, err, port)
		}
	}
}
