package host

import (
	"context"
	"errors"
	"ollie/agent"
	"ollie/toolsrv"
	"os"
	"sync"
)

// toolServers holds each session's toolsrv child, started on first use.
type toolServers struct {
	mu        sync.Mutex
	children  map[string]*toolsrv.Child
	private   map[string]map[string]bool // by session: tools loaded for one agent
	elevate   string                     // the approval gate's socket, for OLLIE_ELEVATE_SOCKET
	namespace string                     // the namespace socket's directory, for OLLIE_NAMESPACE
	spill     string                     // the daemon's SpillArea, where each session's toolsrv keeps cut output
	closed    bool
}

func (ts *toolServers) get(ctx context.Context, s *agent.Session) (*toolsrv.Child, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil, errors.New("olliesrv is shutting down")
	}
	if c := ts.children[s.ID]; c != nil {
		return c, nil
	}
	c, err := toolsrv.Spawn(ctx, toolsrv.SpawnConfig{Cwd: s.Cwd(), SessionID: s.ID, Stderr: os.Stderr, ElevateSocket: ts.elevate, Namespace: ts.namespace, SpillBase: ts.spill, Yolo: s.Yolo})
	if err != nil {
		return nil, err
	}
	if ts.children == nil {
		ts.children = map[string]*toolsrv.Child{}
	}
	ts.children[s.ID] = c
	return c, nil
}

// stop ends a session's toolsrv, which kills its processes.
func (ts *toolServers) stop(id string) {
	ts.mu.Lock()
	c := ts.children[id]
	delete(ts.children, id)
	delete(ts.private, id)
	ts.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// closeAll ends every toolsrv, for shutdown.
func (ts *toolServers) closeAll() {
	ts.mu.Lock()
	ts.closed = true
	ids := make([]string, 0, len(ts.children))
	for id := range ts.children {
		ids = append(ids, id)
	}
	ts.mu.Unlock()
	for _, id := range ids {
		ts.stop(id)
	}
}
