// Package fleet runs one goal on many hosts from the desktop: ollie-remote
// fleet run. For each host it deploys where the host is not on this
// version, has the keeper hold the host (as up does), creates one session
// named after the run, gives it the goal and watches the session's agent
// until the goal is met, blocked or failed; then it reports a row per host.
//
// A run is kept on the desktop (Store), so that it can be watched again
// after the desktop slept or rebooted: the agents keep working on the
// hosts, where their sessions are durable. Nothing one host does stops the
// others: every failure (unreachable, a changed host key, a failed deploy,
// a host lost mid-run) is that host's result.
//
// What it trusts: a host's words (its errors, its agent's output and
// answers, its counts) are data. They are kept as sent, bounded in size,
// and made safe where they reach a terminal (View, WriteTable); JSON
// escapes them.
package fleet

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"ollie/internal/paths"
	"ollie/tunnel"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

// A Run is one goal given to many hosts, as the desktop keeps it.
type Run struct {
	ID      string          `json:"id"`
	Created time.Time       `json:"created"`
	Goal    string          `json:"goal"`
	Targets []string        `json:"targets"`          // as the person typed them
	Source  string          `json:"source,omitempty"` // where the hosts came from
	Profile string          `json:"profile,omitempty"`
	Model   string          `json:"model,omitempty"`
	Session string          `json:"session"` // the session's name on every host
	SSH     paths.SSHConfig `json:"ssh"`     // the keeper that holds the hosts
	// State is running (someone watches it), detached (nobody does: the
	// agents go on), interrupted, stopped or finished.
	State string    `json:"state"`
	Ended time.Time `json:"ended,omitzero"`
	Hosts []*Host   `json:"hosts"`
	// ModelUsage is what the run used of the desktop's model, when its
	// hosts were given it.
	ModelUsage *models.Usage `json:"model_usage,omitempty"`
}

// A Host is one host's part of a run.
type Host struct {
	Name     string           `json:"host"`
	Override *tunnel.Override `json:"override,omitempty"` // connection settings of its inventory entry
	// Route gives the host the desktop's model (its key is in it: never
	// kept in the run's file); Model says what was chosen, for people and
	// for an attach, which makes the route again.
	Route *keeper.ModelsRoute `json:"-"`
	Model *ModelSpec          `json:"model,omitempty"`
	// State is what it does now: connecting, deploying, starting,
	// thinking, running TOOL, waiting for approval, reconnecting, or the
	// result once there is one.
	State string `json:"state"`
	// Result is empty until the host is done: complete, blocked or done
	// (the agent answered without setting the goal's status) when it
	// finished; error, failed, unreachable, lost or interrupted when not.
	Result    string    `json:"result,omitempty"`
	Detail    string    `json:"detail,omitempty"` // the agent's last line of output (never the run's own prompts, which its chat echoes), or why it failed
	Answer    string    `json:"answer,omitempty"` // the agent's last answer
	Agent     string    `json:"agent,omitempty"`
	Version   string    `json:"version,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	Steps     int       `json:"steps"`
	ToolCalls int       `json:"tool_calls"`
	Tokens    int       `json:"tokens"`
	// Notes say why a host was degraded or what happened to it on the
	// way (a restart of its daemon the run picked up).
	Notes []string `json:"notes,omitempty"`
}

// ModelSpec is the desktop's model a host was given: a backend of the
// desktop (via desktop or desktop:BACKEND), the model, the caps.
type ModelSpec struct {
	Via        string `json:"via"`
	Model      string `json:"model,omitempty"`
	Concurrent int    `json:"concurrent,omitempty"`
	RunTokens  int    `json:"run_tokens,omitempty"`
}

// Results of a host that finished its work; the others failed.
var finished = map[string]bool{"complete": true, "blocked": true, "done": true}

// Finished reports whether the host finished (rather than failed).
func (h *Host) Finished() bool { return finished[h.Result] }

// Took is how long the host worked, or has worked so far.
func (h *Host) Took(now time.Time) time.Duration {
	if h.Started.IsZero() {
		return 0
	}
	if !h.Ended.IsZero() {
		now = h.Ended
	}
	return now.Sub(h.Started).Round(100 * time.Millisecond)
}

// NewRun makes a run of goal on hosts, with a fresh ID.
func NewRun(goal string, targets []string, hosts []*Host) *Run {
	id := newID()
	return &Run{ID: id, Created: time.Now().UTC(), Goal: goal, Targets: targets, Session: "fleet-" + id, State: "running", Hosts: hosts}
}

// newID is short enough to type and say: a letter, then eight base-32
// characters of 40 random bits.
func newID() string {
	const digits = "abcdefghijkmnpqrstuvwxyz23456789"
	b := make([]byte, 8)
	rand.Read(b)
	id := []byte{'r'}
	for _, c := range b {
		id = append(id, digits[c&31])
	}
	return string(id)
}

var validID = regexp.MustCompile(`^r[a-z2-9]{8}$`)

// Store keeps runs as files, one per run: Dir/ID.json, 0600 in a 0700
// directory, each replaced whole.
type Store struct{ Dir string }

// DefaultStore is $XDG_STATE_HOME/ollie/runs.
func DefaultStore() (Store, error) {
	dir, err := paths.StateDir()
	return Store{Dir: filepath.Join(dir, "runs")}, err
}

// ErrNoRun is a run ID the store does not hold.
var ErrNoRun = errors.New("no such run")

func (s Store) file(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("%q is not a run ID (fleet ls lists them)", id)
	}
	return filepath.Join(s.Dir, id+".json"), nil
}

// Save writes the run.
func (s Store) Save(r *Run) error {
	name, err := s.file(r.ID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return paths.WriteFileAtomic(name, append(b, '\n'), 0600)
}

// Load reads the run with the ID given, or with the only ID that begins
// with it.
func (s Store) Load(id string) (*Run, error) {
	if !validID.MatchString(id) {
		var match []string
		ents, _ := os.ReadDir(s.Dir)
		for _, e := range ents {
			if n := strings.TrimSuffix(e.Name(), ".json"); strings.HasPrefix(n, id) && id != "" && validID.MatchString(n) {
				match = append(match, n)
			}
		}
		switch len(match) {
		case 0:
			return nil, fmt.Errorf("run %q: %w (fleet ls lists them)", id, ErrNoRun)
		case 1:
			id = match[0]
		default:
			return nil, fmt.Errorf("run %q is ambiguous: %s", id, strings.Join(match, ", "))
		}
	}
	name, _ := s.file(id)
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run %s: %w (fleet ls lists them)", id, ErrNoRun)
	}
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("run %s: %s: %w", id, name, err)
	}
	return &r, nil
}

// List returns every run kept, newest first. A file that does not read
// is skipped and named in the error, with the others returned.
func (s Store) List() ([]*Run, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var runs []*Run
	var bad []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID.MatchString(id) {
			continue
		}
		r, err := s.Load(id)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Created.After(runs[j].Created) })
	if len(bad) > 0 {
		return runs, errors.New(strings.Join(bad, "; "))
	}
	return runs, nil
}

// Counts says how many hosts are in each result, and how many still work.
func (r *Run) Counts() (working int, results map[string]int) {
	results = map[string]int{}
	for _, h := range r.Hosts {
		if h.Result == "" {
			working++
		} else {
			results[h.Result]++
		}
	}
	return working, results
}
