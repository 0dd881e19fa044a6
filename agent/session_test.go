package agent

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

type recorder struct {
	mu  sync.Mutex
	evs []string
}

func (r *recorder) Publish(topic, data string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, topic+" "+data)
}

func TestSessions(t *testing.T) {
	rec := &recorder{}
	r := NewSessions(rec)
	a, err := r.Create(SessionOptions{Name: "proj", Cwd: "/tmp", Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !isUUID(a.ID) || a.Name() != "proj" || a.Cwd() != "/tmp" || a.Owner != "alice" {
		t.Fatalf("session %+v", a)
	}
	b, err := r.Create(SessionOptions{})
	if err != nil || b.Name() != "s1" {
		t.Fatalf("unnamed session: %v %v", b, err)
	}
	if _, err := r.Create(SessionOptions{Name: "proj"}); !errors.Is(err, ErrNameTaken) {
		t.Errorf("duplicate name: %v", err)
	}
	for _, bad := range []string{"", ".hidden", "-x", "a/b", "a b", strings.Repeat("x", 65), a.ID} {
		if err := r.Rename(b.ID, bad); bad != "" && !errors.Is(err, ErrInvalidName) {
			t.Errorf("rename to %q: %v", bad, err)
		}
	}
	if s, ok := r.Lookup(a.ID); !ok || s != a {
		t.Error("lookup by ID failed")
	}
	if err := r.Rename(a.ID, "renamed"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("proj"); ok {
		t.Error("old name still resolves")
	}
	if err := r.Rename(b.ID, "renamed"); !errors.Is(err, ErrNameTaken) {
		t.Errorf("rename onto a taken name: %v", err)
	}
	if err := r.SetPaused(a.ID, true); err != nil || !a.Paused() {
		t.Errorf("pause: %v", err)
	}
	r.SetPaused(a.ID, true) // no change, no event
	if got := r.List(); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("list order: %v", got)
	}
	if err := r.Kill(a.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(a.ID); !errors.Is(err, ErrNoSession) {
		t.Errorf("second kill: %v", err)
	}
	want := []string{
		"session." + a.ID + ".new proj",
		"session." + b.ID + ".new s1",
		"session." + a.ID + ".name renamed",
		"session." + a.ID + ".paused true",
		"session." + a.ID + ".kill renamed",
	}
	if strings.Join(rec.evs, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(rec.evs, "\n"), strings.Join(want, "\n"))
	}
}
