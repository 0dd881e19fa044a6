package toolsrv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"ollie/toolsrv/sandbox"
	"ollie/toolsrv/tool"
)

// A Pool holds each session's toolsrv child, started on first use.
type Pool struct {
	mu       sync.Mutex
	children map[string]*Child
	private  map[string]map[string]bool // by session: tools loaded for one agent
	held     map[string]heldDir         // by session: its directory, as Hold found it
	// Elevate is the approval gate's socket, for OLLIE_ELEVATE_SOCKET;
	// Namespace the namespace socket's directory, for OLLIE_NAMESPACE;
	// Spill the daemon's SpillArea, where each session's toolsrv keeps
	// cut output. Set them before the first Get.
	Elevate, Namespace, Spill string
	// IdleAfter is how long a session's toolsrv waits unused before it
	// stops, to start again at its next use (SpawnConfig.IdleAfter).
	IdleAfter time.Duration

	closed bool
}

// A heldDir is a session's directory as it was when the session was made:
// its identity, and a descriptor that keeps the kernel from giving its
// inode to another directory while the session lives.
type heldDir struct {
	id sandbox.FileID
	f  *os.File
}

// Hold records the directory cwd names now, reached without a symbolic
// link, as session id's: its tools run there only while cwd still names
// it (see Runner.CwdID). Call it when the session is made or restored.
func (ts *Pool) Hold(id, cwd string) error {
	f, err := os.OpenFile(cwd, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("the session's directory: %w", err)
	}
	fid, err := sandbox.Identify(cwd)
	if err == nil {
		var st unix.Stat_t
		if err = unix.Fstat(int(f.Fd()), &st); err == nil && (uint64(st.Dev) != fid.Dev || st.Ino != fid.Ino) {
			err = fmt.Errorf("%s changed while it was being held", cwd)
		}
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("the session's directory: %w", err)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if old, ok := ts.held[id]; ok {
		old.f.Close()
	}
	if ts.held == nil {
		ts.held = map[string]heldDir{}
	}
	ts.held[id] = heldDir{fid, f}
	return nil
}

// Get returns the toolsrv of session id, started on first use in cwd;
// yolo runs its calls unsandboxed and without approval.
func (ts *Pool) Get(ctx context.Context, id, cwd string, yolo bool) (*Child, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil, errors.New("olliesrv is shutting down")
	}
	if c := ts.children[id]; c != nil {
		return c, nil
	}
	var cwdID *sandbox.FileID
	if h, ok := ts.held[id]; ok {
		cwdID = &h.id
	}
	c, err := Spawn(ctx, SpawnConfig{Cwd: cwd, CwdID: cwdID, SessionID: id, Stderr: os.Stderr, ElevateSocket: ts.Elevate, Namespace: ts.Namespace, SpillBase: ts.Spill, Yolo: yolo, IdleAfter: ts.IdleAfter})
	if err != nil {
		return nil, err
	}
	if ts.children == nil {
		ts.children = map[string]*Child{}
	}
	ts.children[id] = c
	return c, nil
}

// Running reports whether session id's toolsrv has a process now: not
// before its first use, nor while it rests.
func (ts *Pool) Running(id string) bool {
	ts.mu.Lock()
	c := ts.children[id]
	ts.mu.Unlock()
	return c != nil && c.Running()
}

// Stop ends a session's toolsrv, which kills its processes.
func (ts *Pool) Stop(id string) {
	ts.mu.Lock()
	c := ts.children[id]
	delete(ts.children, id)
	delete(ts.private, id)
	if h, ok := ts.held[id]; ok {
		h.f.Close()
		delete(ts.held, id)
	}
	ts.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Close ends every toolsrv, for shutdown.
func (ts *Pool) Close() {
	ts.mu.Lock()
	ts.closed = true
	ids := make([]string, 0, len(ts.children)+len(ts.held))
	for id := range ts.children {
		ids = append(ids, id)
	}
	for id := range ts.held {
		if ts.children[id] == nil {
			ids = append(ids, id)
		}
	}
	ts.mu.Unlock()
	for _, id := range ids {
		ts.Stop(id)
	}
}

// ForAgent gives an agent its view of the session's tools. A listed tool
// the toolsrv has not loaded (a profile's, or one the agent loaded before a
// restart) is loaded for that agent alone; one that no longer loads is left
// out, as the model would only see it fail.
func (ts *Pool) ForAgent(ctx context.Context, session string, child *Child, allowed []string, who Caller, named func() (string, string)) *View {
	a := &View{Child: child, allowed: slices.Clone(allowed), who: who, named: named,
		private: func(name string) bool { return ts.isPrivate(session, name) }}
	if allowed == nil {
		return a
	}
	loaded := map[string]bool{}
	if all, err := child.Decls(ctx); err == nil {
		for _, d := range all {
			loaded[d.Name] = true
		}
	}
	for _, name := range allowed {
		if !loaded[name] {
			if _, err := child.RdWr(ctx, "ctl", []byte("load "+name)); err == nil {
				ts.markPrivate(session, name)
			}
		}
	}
	return a
}

// Load loads a tool into the session's toolsrv, for one agent alone, when
// the session does not have it.
func (ts *Pool) Load(ctx context.Context, session string, child *Child, name string) error {
	all, err := child.Decls(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(all, func(d tool.FunctionDecl) bool { return d.Name == name }) {
		if _, err := child.RdWr(ctx, "ctl", []byte("load "+name)); err != nil {
			return err
		}
		ts.markPrivate(session, name)
	}
	return nil
}

func (ts *Pool) markPrivate(session, name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.private == nil {
		ts.private = map[string]map[string]bool{}
	}
	if ts.private[session] == nil {
		ts.private[session] = map[string]bool{}
	}
	ts.private[session][name] = true
}

func (ts *Pool) isPrivate(session, name string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.private[session][name]
}
