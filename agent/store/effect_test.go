package store

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// settlements returns the settlements in recs by call ID.
func settlements(t *testing.T, recs []Record) map[string][]Settlement {
	t.Helper()
	m := make(map[string][]Settlement)
	for _, r := range recs {
		if r.Kind != KindSettle {
			continue
		}
		var st Settlement
		if err := r.Decode(&st); err != nil {
			t.Fatal(err)
		}
		m[st.ID] = append(m[st.ID], st)
	}
	return m
}

func pendingIDs(s *Store) []string {
	var ids []string
	for _, in := range s.Pending() {
		ids = append(ids, in.ID)
	}
	return ids
}

func TestEffectSandwich(t *testing.T) {
	path, s := newFile(t, nil)
	in := Intent{ID: "c1", Tool: "file_write", Args: json.RawMessage(`{"path":"a"}`), Extra: json.RawMessage(`{"turn":3}`)}
	if err := s.Intent(in); err != nil {
		t.Fatal(err)
	}
	p := s.Pending()
	if len(p) != 1 || p[0].ID != "c1" || p[0].Tool != "file_write" || string(p[0].Args) != `{"path":"a"}` ||
		string(p[0].Extra) != `{"turn":3}` || p[0].Seq != 1 || p[0].ReplaySafe || p[0].Rerun {
		t.Fatalf("Pending() = %+v", p)
	}
	if err := s.Intent(in); !errors.Is(err, ErrIntentExists) {
		t.Errorf("second intent with one ID: %v", err)
	}
	if err := s.Settle("nope", json.RawMessage(`{}`)); !errors.Is(err, ErrNoIntent) {
		t.Errorf("settling an unknown call: %v", err)
	}
	if err := s.Settle("c1", json.RawMessage(`{"status":"ok","output":"done"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle("c1", json.RawMessage(`{}`)); !errors.Is(err, ErrSettled) {
		t.Errorf("second settlement: %v", err)
	}
	if err := s.Intent(in); !errors.Is(err, ErrIntentExists) {
		t.Errorf("intent reusing a settled ID: %v", err)
	}
	if len(s.Pending()) != 0 {
		t.Errorf("Pending() after Settle = %+v", s.Pending())
	}

	// The intent goes in one transaction with the message that asked for it;
	// two calls settle together; a transaction settling one call twice is
	// refused whole.
	msg := rec("assistant", `{"calls":["c2","c3"]}`)
	i2, _ := IntentRecord(Intent{ID: "c2", Tool: "shell"})
	i3, _ := IntentRecord(Intent{ID: "c3", Tool: "file_read", ReplaySafe: true})
	if err := s.Commit(msg, i2, i3); err != nil {
		t.Fatal(err)
	}
	s2, _ := SettleRecord("c2", json.RawMessage(`1`))
	if err := s.Commit(s2, s2); !errors.Is(err, ErrSettled) {
		t.Errorf("transaction settling c2 twice: %v", err)
	}
	if ids := pendingIDs(s); len(ids) != 2 {
		t.Errorf("a refused transaction changed Pending: %v", ids)
	}
	s3, _ := SettleRecord("c3", nil)
	if err := s.Commit(s2, s3); err != nil {
		t.Fatal(err)
	}
	i4, _ := IntentRecord(Intent{ID: "c4", Tool: "shell"})
	s4, _ := SettleRecord("c4", json.RawMessage(`"quick"`))
	if err := s.Commit(i4, s4); err != nil {
		t.Errorf("intent and settlement in one transaction: %v", err)
	}
	if _, err := IntentRecord(Intent{ID: "c5"}); err == nil {
		t.Error("intent without a tool")
	}
	mustClose(t, s)

	s, recs := mustOpen(t, path, nil)
	if len(s.Pending()) != 0 || len(s.Warnings()) != 0 {
		t.Errorf("after reopen: pending %v, warnings %q", s.Pending(), s.Warnings())
	}
	st := settlements(t, recs)
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		if len(st[id]) != 1 {
			t.Errorf("%s has %d settlements", id, len(st[id]))
		}
	}
	if string(st["c3"][0].Result) != "null" || st["c1"][0].Interrupted() {
		t.Errorf("settlements %+v", st)
	}
	if err := s.Settle("c1", json.RawMessage(`{}`)); !errors.Is(err, ErrSettled) {
		t.Errorf("settling again after reopen: %v", err)
	}
}

func TestRecover(t *testing.T) {
	path, s := newFile(t, nil)
	for _, in := range []Intent{
		{ID: "write", Tool: "file_write"},
		{ID: "read", Tool: "file_read", ReplaySafe: true},
		{ID: "done", Tool: "shell"},
		{ID: "grep", Tool: "file_grep", ReplaySafe: true},
	} {
		if err := s.Intent(in); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Settle("done", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)

	s, _ = mustOpen(t, path, nil)
	if ids := pendingIDs(s); len(ids) != 3 || ids[0] != "write" || ids[1] != "read" || ids[2] != "grep" {
		t.Fatalf("Pending() = %v", ids)
	}
	again, err := s.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 || again[0].ID != "read" || again[1].ID != "grep" || !again[0].Rerun {
		t.Fatalf("Recover() = %+v", again)
	}
	if ids := pendingIDs(s); len(ids) != 2 {
		t.Errorf("Pending() after Recover = %v", ids)
	}
	// A second Recover in the same process changes nothing.
	if again, err := s.Recover(); err != nil || len(again) != 0 {
		t.Errorf("second Recover() = %+v, %v", again, err)
	}
	// Nor does one while a call of this process runs.
	if err := s.Intent(Intent{ID: "live", Tool: "shell"}); err != nil {
		t.Fatal(err)
	}
	if again, err := s.Recover(); err != nil || len(again) != 0 || len(s.Pending()) != 3 {
		t.Errorf("Recover() with a live call = %+v, %v; pending %v", again, err, pendingIDs(s))
	}
	if err := s.Settle("live", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	seq := s.Seq()
	// The caller re-runs "read" and settles it, then stops before "grep" ends.
	if err := s.Settle("read", json.RawMessage(`{"status":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)

	s, recs := mustOpen(t, path, nil)
	if s.Seq() != seq+1 {
		t.Errorf("seq %d, want %d: the second Recover wrote something", s.Seq(), seq+1)
	}
	p := s.Pending()
	if len(p) != 1 || p[0].ID != "grep" || !p[0].Rerun {
		t.Fatalf("Pending() after reopen = %+v", p)
	}
	again, err = s.Recover()
	if err != nil || len(again) != 0 {
		t.Fatalf("Recover() after the re-run was interrupted = %+v, %v: a call is handed back once", again, err)
	}
	mustClose(t, s)

	s, recs = mustOpen(t, path, nil)
	if again, err := s.Recover(); err != nil || len(again) != 0 || len(s.Pending()) != 0 {
		t.Errorf("Recover() with nothing pending = %+v, %v", again, err)
	}
	st := settlements(t, recs)
	for id, reason := range map[string]string{"write": ReasonInterrupted, "grep": ReasonRerunFailed, "read": "", "done": "", "live": ""} {
		if len(st[id]) != 1 {
			t.Errorf("%s has %d settlements, want 1", id, len(st[id]))
			continue
		}
		var r InterruptedResult
		json.Unmarshal(st[id][0].Result, &r)
		if got := st[id][0].Interrupted(); got != (reason != "") || r.Reason != reason {
			t.Errorf("%s settled with %s", id, st[id][0].Result)
		}
	}
	var reruns int
	for _, r := range recs {
		if r.Kind == KindRerun {
			reruns++
		}
	}
	if reruns != 2 {
		t.Errorf("%d rerun records, want 2", reruns)
	}
}

// TestRecoverHandEdited checks that settlements a store would refuse, found
// in a file, are warned about and ignored rather than failing the open.
func TestRecoverHandEdited(t *testing.T) {
	path, s := newFile(t, nil)
	if err := s.Intent(Intent{ID: "c1", Tool: "shell"}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	appendRaw(t, path, `{"kind":"tool.settle","seq":2,"time":"2026-01-01T00:00:00Z","id":"ghost","result":{}}`+"\n")
	appendRaw(t, path, `{"kind":"tool.settle","seq":3,"time":"2026-01-01T00:00:00Z","id":"c1","result":{}}`+"\n")
	appendRaw(t, path, `{"kind":"tool.settle","seq":4,"time":"2026-01-01T00:00:00Z","id":"c1","result":{}}`+"\n")
	s, recs := mustOpen(t, path, nil)
	if len(recs) != 4 || len(s.Warnings()) != 2 || len(s.Pending()) != 0 {
		t.Errorf("records %d, warnings %q, pending %v", len(recs), s.Warnings(), s.Pending())
	}
	if fi, _ := os.Stat(path); fi.Size() == 0 {
		t.Error("file emptied")
	}
}
