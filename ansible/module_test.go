package ansible

import (
	"io"
	"strings"
	"testing"
	"time"
)

// A module told that its password comes on stdin, with a stdin that
// never ends, fails instead of hanging its task.
func TestReadPasswordWithin(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	start := time.Now()
	if pw, err := readPasswordWithin(r, 100*time.Millisecond); err == nil {
		t.Fatalf("read %q from a stdin that never ended", pw)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v, want about 100ms", d)
	}
	pw, err := readPasswordWithin(strings.NewReader("s3cret"), time.Second)
	if err != nil || string(pw) != "s3cret" {
		t.Errorf("read %q, %v", pw, err)
	}
}
