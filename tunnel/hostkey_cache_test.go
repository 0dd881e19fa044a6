package tunnel

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

func testHostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Connections share one parse of a known_hosts file while it is
// unchanged; once it changes, the next connection reads it again, so a
// key taken out of it is refused at once.
func TestKnownHostsParsedOnceWhileUnchanged(t *testing.T) {
	kh := filepath.Join(t.TempDir(), "known_hosts")
	a, b := testHostKey(t), testHostKey(t)
	line := func(port int, k ssh.PublicKey) string {
		return fmt.Sprintf("[127.0.0.1]:%d %s", port, ssh.MarshalAuthorizedKey(k))
	}
	if err := os.WriteFile(kh, []byte(line(2201, a)+line(2202, b)), 0o600); err != nil {
		t.Fatal(err)
	}
	target := func(port int) *Target {
		return &Target{Alias: fmt.Sprint("h", port), HostName: "127.0.0.1", Port: port, User: "u", KnownHosts: []string{kh}}
	}
	check := func(port int, k ssh.PublicKey) error {
		hk, err := newHostKeys(target(port), false, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		return hk.check(target(port).Addr(), hk.remote(), k)
	}

	// Many connections at once: one entry, one parse.
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- check(2201, a)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a known key refused: %v", err)
		}
	}
	parsedKnownHosts.mu.Lock()
	first := parsedKnownHosts.entries[kh]
	parsedKnownHosts.mu.Unlock()
	if first == nil {
		t.Fatal("no parse was kept")
	}
	if err := check(2202, b); err != nil {
		t.Fatalf("the other host's key refused: %v", err)
	}
	parsedKnownHosts.mu.Lock()
	same := parsedKnownHosts.entries[kh] == first
	parsedKnownHosts.mu.Unlock()
	if !same {
		t.Error("an unchanged file was parsed again")
	}

	// b's line taken out: b is unknown at the next connection.
	if err := os.WriteFile(kh, []byte(line(2201, a)), 0o600); err != nil {
		t.Fatal(err)
	}
	var unknown *UnknownHostError
	if err := check(2202, b); !errors.As(err, &unknown) {
		t.Errorf("a key removed from known_hosts: %v, want it unknown", err)
	}
	if err := check(2201, a); err != nil {
		t.Errorf("the key left in the file refused: %v", err)
	}
}
