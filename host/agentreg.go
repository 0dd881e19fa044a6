package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/agent"
	"ollie/ns/stream"
)

// agentGroup is the 9P group of the files of every agent people made. No
// agent is a member, so other agents get the "other" bits: they cannot
// read an agent's chat, log, fifo or ctl. An agent an agent made has its
// maker's group instead (makerGroup).
const agentGroup = "agent"

// agents holds the live agents of every session.
type agents struct {
	mu      sync.Mutex
	byID    map[string]*agentEntry
	byToken map[string]*agentEntry
	claimed map[[2]string]chan struct{} // session and name an agent is about to take; closed when it has
	closed  bool
}

type agentEntry struct {
	*agent.Agent
	session string
	created time.Time
	// Its name, model and directory are the agent's own (agent.Agent);
	// these are what only the namespace knows of it.
	mu      sync.Mutex
	backend string
	profile string
	peers   map[string]bool           // agent IDs this agent may message
	outs    map[string]*stream.Stream // background process output, copied from toolsrv

	// token is the agent's capability: its tools present it to attach as
	// the agent (see identify). It lives in memory only; a restart makes
	// new ones, as it ends every tool that held the old.
	token  string
	parent string   // the agent whose tool created this one, if any
	depth  int      // how many such creations lie above it
	limit  []string // the tools it may ever have (nil: no limit)
}

// of returns a session's agents, oldest first.
func (as *agents) of(session string) []*agentEntry {
	as.mu.Lock()
	var list []*agentEntry
	for _, e := range as.byID {
		if e.session == session {
			list = append(list, e)
		}
	}
	as.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].created.Before(list[j].created) })
	return list
}

// lookup finds a session's agent by name or ID.
func (as *agents) lookup(session, nameOrID string) *agentEntry {
	for _, e := range as.of(session) {
		if e.ID() == nameOrID || e.Name() == nameOrID {
			return e
		}
	}
	return nil
}

// claim holds name in session for an agent being made or renamed (self,
// or nil for a new one) until release is called, so that two requests at
// once (two chats starting in one directory) cannot both take it between
// the check and the agent's arrival. A request for a name another holds
// waits for that one to finish: it then finds the agent made, or the
// name free again. It reports false if another agent has the name, or
// ctx ends first.
func (as *agents) claim(ctx context.Context, session, name string, self *agentEntry) (release func(), ok bool) {
	key := [2]string{session, name}
	for {
		as.mu.Lock()
		held, busy := as.claimed[key]
		if !busy {
			break
		}
		as.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, false
		}
	}
	defer as.mu.Unlock()
	for _, e := range as.byID {
		if e != self && e.session == session && (e.Name() == name || e.ID() == name) {
			return nil, false
		}
	}
	if as.claimed == nil {
		as.claimed = map[[2]string]chan struct{}{}
	}
	done := make(chan struct{})
	as.claimed[key] = done
	return func() {
		as.mu.Lock()
		delete(as.claimed, key)
		as.mu.Unlock()
		close(done)
	}, true
}

// add registers an agent; it reports false once shutting down.
func (as *agents) add(e *agentEntry) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.closed {
		return false
	}
	if as.byID == nil {
		as.byID = map[string]*agentEntry{}
	}
	as.byID[e.ID()] = e
	if as.byToken == nil {
		as.byToken = map[string]*agentEntry{}
	}
	as.byToken[e.token] = e
	return true
}

func (as *agents) remove(id string) *agentEntry {
	as.mu.Lock()
	defer as.mu.Unlock()
	e := as.byID[id]
	delete(as.byID, id)
	if e != nil {
		delete(as.byToken, e.token)
	}
	return e
}

// get returns a live agent by ID.
func (as *agents) get(id string) *agentEntry {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.byID[id]
}

// identify is the namespace's ns.Server.Identify: a sandboxed peer is the
// live agent whose capability it presents as its aname, and none without
// one. The name it attaches with proves nothing.
func (as *agents) identify(uname, aname string) string {
	if len(aname) != 2*tokenBytes {
		return ""
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if e := as.byToken[aname]; e != nil {
		return e.ID()
	}
	return ""
}

// member is the namespace's ns.Server.InGroup. A session's directory has
// the session's ID as its group, and the session's agents are its members,
// so that they may write its goalstatus; an agent is the member of the
// group of the agents it made (makerGroup).
func (as *agents) member(user, group string) bool {
	if maker, ok := strings.CutPrefix(group, makerGroup("")); ok {
		return user == maker && as.get(user) != nil
	}
	e := as.get(user)
	return e != nil && e.session == group
}

const tokenBytes = 32

func newToken() string {
	var b [tokenBytes]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// killSession closes every agent of a session.
func (as *agents) killSession(session string) {
	for _, e := range as.of(session) {
		as.remove(e.ID())
		e.Close()
	}
}

// closeAll closes every agent, for shutdown.
func (as *agents) closeAll() {
	as.mu.Lock()
	as.closed = true
	list := make([]*agentEntry, 0, len(as.byID))
	for _, e := range as.byID {
		list = append(list, e)
	}
	as.byID, as.byToken = nil, nil
	as.mu.Unlock()
	for _, e := range list {
		e.Close()
	}
}
