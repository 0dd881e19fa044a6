// Package agent runs ollie's sessions and agents. This file holds the
// session registry: named, renamable sessions with immutable IDs.
package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/agent/wire"
	"ollie/internal/changes"
)

// Errors a caller can test with errors.Is.
var (
	ErrNoSession   = errors.New("agent: no such session")
	ErrNameTaken   = errors.New("agent: session name is taken")
	ErrInvalidName = errors.New("agent: invalid session name")
)

// A Publisher receives events; ns.Bus is one.
type Publisher interface {
	Publish(topic, data string)
}

// A Session groups agents working on one task.
type Session struct {
	ID      string // immutable UUID
	Owner   string // the namespace user who created it
	Created time.Time
	// Yolo is set for good at creation: the session's tools run without
	// the sandbox and without approvals (sudo still needs both gates).
	Yolo bool
	// ResumeManual is set at creation: a turn a stop of olliesrv cut
	// short waits for a person instead of going on by itself.
	ResumeManual bool

	mu     sync.Mutex
	name   string
	cwd    string
	paused bool

	goal       string
	goalStatus string
	goalChange changes.Counter // bumped under mu when the goal status changes
}

// Goal statuses.
var GoalStatuses = []string{"none", "running", "complete", "blocked", "error"}

// GoalPrompt is the prompt a session's goal gives its first agent
// (wire.GoalPrompt, the wording's one home).
func GoalPrompt(goal, session string) string { return wire.GoalPrompt(goal, session) }

// Goal returns the session's goal and its status.
func (s *Session) Goal() (goal, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.goalStatus == "" {
		return s.goal, "none"
	}
	return s.goal, s.goalStatus
}

// SetGoal replaces the goal and, when status is not "", its status.
func (s *Session) SetGoal(goal *string, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if goal != nil {
		s.goal = *goal
	}
	if status != "" && status != s.goalStatus {
		s.goalStatus = status
		s.goalChange.Bump()
	}
}

// WaitGoal blocks until the goal status differs from current, or ctx ends.
func (s *Session) WaitGoal(ctx context.Context, current string) (string, error) {
	var st string
	err := s.goalChange.Until(ctx, func() bool {
		_, st = s.Goal()
		return st != current
	})
	if err != nil {
		return "", err
	}
	return st, nil
}

// Name returns the session's current display name.
func (s *Session) Name() string { s.mu.Lock(); defer s.mu.Unlock(); return s.name }

// Cwd returns the session's working directory.
func (s *Session) Cwd() string { s.mu.Lock(); defer s.mu.Unlock(); return s.cwd }

// Paused reports whether the session is paused.
func (s *Session) Paused() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.paused }

// Sessions is the registry of live sessions.
type Sessions struct {
	events Publisher

	mu     sync.Mutex
	byID   map[string]*Session
	byName map[string]*Session
	seq    int
}

// NewSessions returns an empty registry publishing to events (may be nil).
func NewSessions(events Publisher) *Sessions {
	return &Sessions{events: events, byID: map[string]*Session{}, byName: map[string]*Session{}}
}

func (r *Sessions) publish(s *Session, what, data string) {
	if r.events != nil {
		r.events.Publish("session."+s.ID+"."+what, data)
	}
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// checkName reports why name cannot name a session, if it cannot.
func checkName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w %q: use 1-64 letters, digits, '.', '_' or '-', not starting with '.' or '-'", ErrInvalidName, name)
	}
	if isUUID(name) {
		return fmt.Errorf("%w %q: a name cannot look like a session ID", ErrInvalidName, name)
	}
	if Reserved(name) {
		return fmt.Errorf("%w %q: it is the name of a file beside the sessions (%s)", ErrInvalidName, name, strings.Join(reservedNames, ", "))
	}
	return nil
}

// reservedNames are the files beside the named directories of session/
// and of session/S/agent/: a session or agent with one of these names
// could never be reached.
var reservedNames = []string{"new", "idx"}

// Reserved reports whether name is one no session or agent may take.
func Reserved(name string) bool { return slices.Contains(reservedNames, name) }

// SessionOptions are the settings a new session starts with.
type SessionOptions struct {
	Name  string // empty: the next free "sN"
	Cwd   string
	Owner string
	Yolo  bool // tools unsandboxed and unapproved: the caller decides who may ask
	// ResumeManual: a turn cut short by a stop of olliesrv waits for a
	// person (resume=manual) instead of going on by itself.
	ResumeManual bool
}

// Create starts a session.
func (r *Sessions) Create(opt SessionOptions) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := opt.Name
	if name == "" {
		for {
			r.seq++
			name = fmt.Sprintf("s%d", r.seq)
			if r.byName[name] == nil {
				break
			}
		}
	} else if err := checkName(name); err != nil {
		return nil, err
	}
	if r.byName[name] != nil {
		return nil, fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	s := &Session{ID: newUUID(), Owner: opt.Owner, Created: time.Now(), Yolo: opt.Yolo, ResumeManual: opt.ResumeManual, name: name, cwd: opt.Cwd}
	r.byID[s.ID] = s
	r.byName[name] = s
	r.publish(s, "new", name)
	return s, nil
}

// Restore puts back a session read from its file, with its own ID.
func (r *Sessions) Restore(id string, created time.Time, opt SessionOptions, paused bool) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[id] != nil {
		return nil, fmt.Errorf("agent: session %s restored twice", id)
	}
	name := opt.Name
	if r.byName[name] != nil || checkName(name) != nil {
		name = id // a clash or a bad name must not lose the session
	}
	s := &Session{ID: id, Owner: opt.Owner, Created: created, Yolo: opt.Yolo, ResumeManual: opt.ResumeManual, name: name, cwd: opt.Cwd, paused: paused}
	r.byID[id] = s
	r.byName[name] = s
	r.publish(s, "restore", name)
	return s, nil
}

// Lookup finds a session by name or by ID.
func (r *Sessions) Lookup(nameOrID string) (*Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.byName[nameOrID]; s != nil {
		return s, true
	}
	s := r.byID[nameOrID]
	return s, s != nil
}

// List returns the live sessions, oldest first.
func (r *Sessions) List() []*Session {
	r.mu.Lock()
	list := make([]*Session, 0, len(r.byID))
	for _, s := range r.byID {
		list = append(list, s)
	}
	r.mu.Unlock()
	sort.Slice(list, func(i, j int) bool {
		if !list[i].Created.Equal(list[j].Created) {
			return list[i].Created.Before(list[j].Created)
		}
		return list[i].ID < list[j].ID
	})
	return list
}

// Rename gives the session id a new name.
func (r *Sessions) Rename(id, name string) error { return r.RenameRecorded(id, name, nil) }

// RenameRecorded is Rename that calls record (when not nil) once the new
// name is found valid and free, and renames only if it succeeds, so that
// no one sees a name the session file does not hold. The registry stays
// locked meanwhile: no other rename can take the name in between.
func (r *Sessions) RenameRecorded(id, name string, record func() error) error {
	if err := checkName(name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byID[id]
	if s == nil {
		return fmt.Errorf("%w: %s", ErrNoSession, id)
	}
	old := s.Name()
	if old == name {
		return nil
	}
	if r.byName[name] != nil {
		return fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	if record != nil {
		if err := record(); err != nil {
			return err
		}
	}
	delete(r.byName, old)
	r.byName[name] = s
	s.mu.Lock()
	s.name = name
	s.mu.Unlock()
	r.publish(s, "name", name)
	return nil
}

// Kill ends the session id.
func (r *Sessions) Kill(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byID[id]
	if s == nil {
		return fmt.Errorf("%w: %s", ErrNoSession, id)
	}
	delete(r.byID, id)
	delete(r.byName, s.Name())
	r.publish(s, "kill", s.Name())
	return nil
}

// SetPaused pauses or resumes the session id.
func (r *Sessions) SetPaused(id string, paused bool) error {
	r.mu.Lock()
	s := r.byID[id]
	r.mu.Unlock()
	if s == nil {
		return fmt.Errorf("%w: %s", ErrNoSession, id)
	}
	s.mu.Lock()
	changed := s.paused != paused
	s.paused = paused
	s.mu.Unlock()
	if changed {
		r.publish(s, "paused", fmt.Sprint(paused))
	}
	return nil
}

// NewID returns a new random ID for a session or an agent.
func NewID() string { return newUUID() }

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func isUUID(s string) bool { return uuidRE.MatchString(strings.ToLower(s)) }
