package keeper

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeeperLogRotates: written far past its cap, the log stays under the
// cap plus one line, with one rotated file beside it (972 MiB of
// keeper.log in 25 s filled the runtime directory).
func TestKeeperLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keeper.log")
	const limit = 64 << 10
	f, err := openRotating(path, limit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := slog.New(slog.NewTextHandler(f, nil)).With("host", "h4")
	longest := 0
	for i := range 20000 {
		line := strings.Repeat("x", i%300)
		log.Info("resume: server reply to no request", "n", i, "junk", line)
		longest = max(longest, len(line)+120)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > limit+int64(longest) {
		t.Errorf("keeper.log is %d bytes, cap %d", fi.Size(), limit)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[1] != "keeper.log.1" {
		t.Errorf("files %q, want keeper.log and keeper.log.1", names)
	}
	if fi, err := os.Stat(path + ".1"); err != nil || fi.Size() > limit+int64(longest) {
		t.Errorf("keeper.log.1: %v, %v", fi, err)
	}
}

// TestKeeperLogRepeats: the same record from a host over and over is
// written once per interval, the next one saying how many were dropped;
// another host's, or another message, still gets through.
func TestKeeperLogRepeats(t *testing.T) {
	var b lockedBuf
	h := newRepeatHandler(slog.NewTextHandler(&b, nil), time.Hour)
	log := slog.New(h)
	h4, h5 := log.With("host", "h4"), log.With("host", "h5")
	for range 10000 {
		h4.Warn("resume: server reply to no request; dropped", "type", 101, "tag", 7)
	}
	h5.Warn("resume: server reply to no request; dropped", "type", 101, "tag", 7)
	h4.Info("something else")
	out := b.String()
	if n := strings.Count(out, "\n"); n != logBurst+2 {
		t.Errorf("%d lines, want %d:\n%s", n, logBurst+2, out)
	}
	if !strings.Contains(out, "host=h5") || !strings.Contains(out, "something else") {
		t.Errorf("other records lost:\n%s", out)
	}

	// After the interval the record passes again, with the count.
	var b2 lockedBuf
	h = newRepeatHandler(slog.NewTextHandler(&b2, nil), time.Hour)
	log = slog.New(h).With("host", "h4")
	for range 100 {
		log.Warn("again")
	}
	// The handler goes by each record's time: the last comes an interval
	// later.
	later := slog.NewRecord(time.Now().Add(time.Hour+time.Second), slog.LevelWarn, "again", 0)
	if err := log.Handler().Handle(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	if out := b2.String(); strings.Count(out, "\n") != logBurst+1 || !strings.Contains(out, fmt.Sprintf("repeated=%d", 100-logBurst)) {
		t.Errorf("after the interval:\n%s", out)
	}
}

type lockedBuf struct{ strings.Builder }
