package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// The record kinds of the effect sandwich. The store reads these itself, on
// Commit and on Open; every other kind is the caller's.
const (
	KindIntent = "tool.intent" // a tool call about to run: Intent
	KindSettle = "tool.settle" // how it ended: Settlement
	KindRerun  = "tool.rerun"  // Recover handed a replay-safe call back to be run again
)

// Errors of the effect sandwich, for errors.Is.
var (
	ErrIntentExists = errors.New("store: a tool call with this ID was already committed")
	ErrNoIntent     = errors.New("store: no tool call with this ID is waiting for a settlement")
	ErrSettled      = errors.New("store: the tool call is already settled")
)

// StatusInterrupted is the status of the result Recover settles a call with.
const StatusInterrupted = "interrupted"

// The reasons Recover gives in an interrupted settlement.
const (
	ReasonInterrupted = "the call was interrupted: olliesrv stopped while this tool was running, so whether it finished and what it did are unknown; it was not run again"
	ReasonRerunFailed = "the call was interrupted: olliesrv stopped while this tool was running, and again before its second run was settled, so whether it finished and what it did are unknown; it was not run again"
)

// An Intent is a tool call committed before it runs.
type Intent struct {
	ID         string          `json:"id"`   // the call's ID, unique in the file
	Tool       string          `json:"tool"` // the tool's name
	Args       json.RawMessage `json:"args,omitempty"`
	ReplaySafe bool            `json:"replaySafe"` // the tool may run again after a crash
	Extra      json.RawMessage `json:"extra,omitempty"`

	Seq   uint64 `json:"-"` // the intent record's seq
	Rerun bool   `json:"-"` // Recover already handed it back to be run again
}

// A Settlement ends a tool call: Result is the caller's, or the
// interrupted result Recover writes.
type Settlement struct {
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result"`
}

// InterruptedResult is what Recover settles an interrupted call with:
// {"status":"interrupted","reason":...}.
type InterruptedResult struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Interrupted reports whether the settlement is one Recover wrote.
func (st Settlement) Interrupted() bool {
	var r InterruptedResult
	return json.Unmarshal(st.Result, &r) == nil && r.Status == StatusInterrupted
}

type rerun struct {
	ID string `json:"id"`
}

// IntentRecord returns the record Intent commits, to put in a transaction
// with other records (say, the assistant message that asked for the call).
func IntentRecord(in Intent) (Record, error) {
	if in.ID == "" {
		return Record{}, errors.New("store: intent has no ID")
	}
	if in.Tool == "" {
		return Record{}, fmt.Errorf("store: intent %q has no tool", in.ID)
	}
	return NewRecord(KindIntent, in)
}

// SettleRecord returns the record Settle commits, to put in a transaction
// with other records.
func SettleRecord(id string, result json.RawMessage) (Record, error) {
	if id == "" {
		return Record{}, errors.New("store: settlement has no ID")
	}
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	return NewRecord(KindSettle, Settlement{id, result})
}

// Intent commits in before its tool runs. in.ID must not have been used in
// this file before.
func (s *Store) Intent(in Intent) error {
	r, err := IntentRecord(in)
	if err != nil {
		return err
	}
	return s.Commit(r)
}

// Settle commits the result of the call id after its tool ran. It fails with
// ErrSettled if the call is settled already, so no call is settled twice.
func (s *Store) Settle(id string, result json.RawMessage) error {
	r, err := SettleRecord(id, result)
	if err != nil {
		return err
	}
	return s.Commit(r)
}

// Pending returns the intents without a settlement, oldest first: those
// left by an earlier process and those of calls running now.
func (s *Store) Pending() []Intent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fx.list()
}

// Recover settles the calls a crash interrupted, and returns the ones to run
// again. It acts only on the intents pending when the file was opened, left
// by an earlier process; calls committed through this Store (including
// those Recover hands back) are running, and are left alone. For each such
// intent, oldest first:
//
//   - replay-safe and not yet handed back: Recover commits a KindRerun
//     record for it and returns it; the caller runs it once more and Settles
//     it;
//   - otherwise (not replay-safe, or handed back before and still unsettled,
//     which means the process stopped again during the second run): Recover
//     commits one settlement with an InterruptedResult, and the tool is not
//     run again.
//
// All of this is one transaction, so a crash during Recover leaves either
// all of it or none of it, and calling Recover again (in the same process or
// after a restart) never settles a call twice nor hands one back twice. A
// replay-safe call therefore runs at most twice in all.
func (s *Store) Recover() ([]Intent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var recs []Record
	var again []Intent
	for _, in := range s.fx.list() {
		if s.live[in.ID] {
			continue // this store committed it, and its tool may be running now
		}
		if in.ReplaySafe && !in.Rerun {
			r, err := NewRecord(KindRerun, rerun{in.ID})
			if err != nil {
				return nil, err
			}
			recs = append(recs, r)
			in.Rerun = true
			again = append(again, in)
			continue
		}
		reason := ReasonInterrupted
		if in.Rerun {
			reason = ReasonRerunFailed
		}
		res, err := json.Marshal(InterruptedResult{StatusInterrupted, reason})
		if err != nil {
			return nil, err
		}
		r, err := SettleRecord(in.ID, res)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	if _, err := s.commitLocked(recs); err != nil {
		return nil, err
	}
	return again, nil
}

// effects tracks the tool calls of a file: pending intents and settled IDs.
type effects struct {
	pending map[string]Intent
	settled map[string]bool
}

func (fx *effects) init() {
	fx.pending = make(map[string]Intent)
	fx.settled = make(map[string]bool)
}

func (fx *effects) list() []Intent {
	l := make([]Intent, 0, len(fx.pending))
	for _, in := range fx.pending {
		l = append(l, in)
	}
	slices.SortFunc(l, func(a, b Intent) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return l
}

// change is one record's effect on the tool calls, decoded and checked
// against the state before it.
type change struct {
	kind   string
	intent Intent
	id     string
}

// check decodes the effect of r given the state fx plus the earlier changes
// of the same commit.
func (fx *effects) check(r Record, earlier []change) (change, error) {
	state := func(id string) (pending *Intent, settled bool) {
		// The latest change to id within the commit wins.
		for i := len(earlier) - 1; i >= 0; i-- {
			c := earlier[i]
			if c.id != id {
				continue
			}
			switch c.kind {
			case KindIntent:
				return &c.intent, false
			case KindRerun:
				in := c.intent
				return &in, false
			case KindSettle:
				return nil, true
			}
		}
		if in, ok := fx.pending[id]; ok {
			return &in, false
		}
		return nil, fx.settled[id]
	}
	switch r.Kind {
	case KindIntent:
		var in Intent
		if err := r.Decode(&in); err != nil {
			return change{}, err
		}
		if in.ID == "" {
			return change{}, fmt.Errorf("store: intent (seq %d) has no id", r.Seq)
		}
		if p, settled := state(in.ID); p != nil || settled {
			return change{}, fmt.Errorf("%w: %q", ErrIntentExists, in.ID)
		}
		in.Seq = r.Seq
		return change{KindIntent, in, in.ID}, nil
	case KindSettle:
		var st Settlement
		if err := r.Decode(&st); err != nil {
			return change{}, err
		}
		p, settled := state(st.ID)
		if settled {
			return change{}, fmt.Errorf("%w: %q", ErrSettled, st.ID)
		}
		if p == nil {
			return change{}, fmt.Errorf("%w: %q", ErrNoIntent, st.ID)
		}
		return change{KindSettle, Intent{}, st.ID}, nil
	case KindRerun:
		var rr rerun
		if err := r.Decode(&rr); err != nil {
			return change{}, err
		}
		p, _ := state(rr.ID)
		switch {
		case p == nil:
			return change{}, fmt.Errorf("%w: %q", ErrNoIntent, rr.ID)
		case !p.ReplaySafe:
			return change{}, fmt.Errorf("store: rerun of %q, which is not replay-safe", rr.ID)
		case p.Rerun:
			return change{}, fmt.Errorf("store: second rerun of %q", rr.ID)
		}
		in := *p
		in.Rerun = true
		return change{KindRerun, in, rr.ID}, nil
	}
	return change{}, nil
}

// checkAll checks the records of one commit in order.
func (fx *effects) checkAll(recs []Record) ([]change, error) {
	var cs []change
	for _, r := range recs {
		c, err := fx.check(r, cs)
		if err != nil {
			return nil, err
		}
		if c.kind != "" {
			cs = append(cs, c)
		}
	}
	return cs, nil
}

func (fx *effects) apply(cs []change) {
	for _, c := range cs {
		switch c.kind {
		case KindIntent, KindRerun:
			fx.pending[c.id] = c.intent
		case KindSettle:
			delete(fx.pending, c.id)
			fx.settled[c.id] = true
		}
	}
}
