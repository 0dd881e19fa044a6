package ns_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"9fans.net/go/plan9"

	"ollie/ns"
)

// FuzzPrincipals runs programs of 9P operations in which who attaches
// changes from one attach to the next and from one connection to the
// next: the input picks each connection's peer kind and, for each
// Tattach, the user name and a capability that proves it, proves someone
// else, or is missing. An oracle written from the trust rules in
// docs/architecture.md says who each attach must be, and the program
// fails if the server disagrees (whoami), lets a principal walk, open or
// wstat what the mode denies it, lets none change anything, runs the
// secret's or a plan's handler for a principal the mode denies, or
// leaves a goroutine or fid behind once its connections end.
//
// make fuzz runs it briefly with
//
//	go test ./ns -run '^$' -fuzz '^FuzzPrincipals$' -fuzztime 12000x -fuzzminimizetime 200x
func FuzzPrincipals(f *testing.F) {
	// The first connection's peer kind, then ops: each a byte, then its
	// arguments (see principalProgram.run).
	f.Add([]byte{
		byte(ns.Sandboxed),
		opAttach, 0, 1, capOwn, // alice, proved
		opWalk, 0, 1, 11, // secret
		opOpen, 1, plan9.OREAD,
		opRead, 1,
		opAttach, 2, 2, capOwn, // bob, proved
		opWalk, 2, 3, 11,
		opOpen, 3, plan9.OREAD,
		opAttach, 4, 1, capOther, // alice with bob's key: none
		opWalk, 4, 5, 10, // notes
		opOpen, 5, plan9.OWRITE,
		opWrite, 5, 0,
	})
	f.Add([]byte{
		byte(ns.Remote),
		opAttach, 0, 0, capOwn, // glenda over TCP: none
		opWalk, 0, 1, 10,
		opOpen, 1, plan9.ORDWR,
		opWstat, 1,
		opWalk, 0, 2, 5, // ctl: 0222, but none never writes
		opOpen, 2, plan9.OWRITE,
		opWrite, 2, 0,
		opConnect, byte(ns.Owner),
		opAttach, 0, 5, capNone, // "none" from the owner: admin
		opWalk, 0, 1, 16, // session/alpha/plan
		opOpen, 1, plan9.ORDWR,
		opWrite, 1, 1,
		opRead, 1,
	})
	f.Add([]byte{
		byte(ns.Sandboxed),
		opAttach, 0, 4, capOwn, // admin, "proved": none
		opAttach, 1, 6, capOwn, // staff, proved: no member of staff
		opWalk, 1, 2, 11,
		opOpen, 2, plan9.OREAD,
		opAttach, 3, 2, capOwn, // bob owns beta
		opWalk, 3, 4, 17,
		opOpen, 4, plan9.ORDWR,
		opWrite, 4, 2,
		opWalk, 0, 5, 17,
		opOpen, 5, plan9.OWRITE,
		opClunk, 4,
		opWalk, 3, 6, 12, // drop: bob is not in staff
		opOpen, 6, plan9.OWRITE,
	})
	f.Fuzz(func(t *testing.T, prog []byte) {
		before := runtime.NumGoroutine()
		w := newWorld(t)
		srv, lb := newFuzzServer(w)
		p := &principalProgram{t: t, w: w, srv: srv, prog: prog}
		p.run()
		checkDrained(t, srv, lb, before)
		w.mu.Lock()
		readers := slices.Clone(w.readers)
		w.mu.Unlock()
		for _, r := range readers {
			file, user, _ := strings.Cut(r, " ")
			o, who := fuzzNodes[file], oracle{user: user, admin: user == ns.Admin}
			if !who.may(o.owner, o.group, o.mode, plan9.AREAD) {
				t.Fatalf("%s's handler ran for %s, whom its mode %#o (%s:%s) denies", file, user, o.mode, o.owner, o.group)
			}
		}
	})
}

// The ops of a principal program.
const (
	opConnect = iota // kind: end the connection, start one of this peer kind
	opAttach         // fid, user, capability
	opWalk           // fid, newfid, path
	opOpen           // fid, mode
	opRead           // fid
	opWrite          // fid, payload
	opWstat          // fid: truncate, the one wstat allowed
	opClunk          // fid
	numOps
)

// The capabilities an attach may present as its aname.
const (
	capOwn   = iota // key(user): proves user
	capOther        // another user's key
	capNone         // no aname
	capJunk         // not a key at all
	numCaps
)

var (
	fuzzUsers    = []string{"glenda", "alice", "bob", "", ns.Admin, ns.None, "staff", "ollie"}
	fuzzPayloads = []string{"x", "fail", "*", strings.Repeat("y", 300)}

	// fuzzPaths are walked from a fid; each names a file of the test
	// tree, whose mode the oracle knows from fuzzNodes.
	fuzzPaths = []string{
		"", "hello", "counter", "big", "whoami", "ctl", "calc", "log",
		"trim", "wait", "notes", "secret", "drop", "private",
		"private/note", "session", "session/alpha/plan",
		"session/beta/plan", "session/id-1/name", "session/beta",
		"event", "..", "nosuch",
	}
)

// fuzzNode is what the oracle knows of a file: owner, group and mode.
type fuzzNode struct {
	owner, group string
	mode         plan9.Perm
}

// fuzzNodes restates the test tree's modes (fixture_test.go); the tree's
// owner is glenda, its group ollie.
var fuzzNodes = map[string]fuzzNode{
	"":                   {"glenda", "ollie", plan9.DMDIR | 0555},
	"hello":              {"glenda", "ollie", 0444},
	"counter":            {"glenda", "ollie", 0444},
	"big":                {"glenda", "ollie", 0444},
	"whoami":             {"glenda", "ollie", 0444},
	"ctl":                {"glenda", "ollie", 0222},
	"calc":               {"glenda", "ollie", 0666},
	"log":                {"glenda", "ollie", 0444},
	"trim":               {"glenda", "ollie", 0444},
	"wait":               {"glenda", "ollie", 0444},
	"event":              {"glenda", "ollie", 0666},
	"notes":              {"glenda", "ollie", 0644},
	"secret":             {"glenda", "staff", 0440},
	"drop":               {"glenda", "staff", 0020},
	"private":            {"glenda", "ollie", plan9.DMDIR | 0700},
	"private/note":       {"glenda", "ollie", 0444},
	"session":            {"glenda", "ollie", plan9.DMDIR | 0555},
	"session/alpha":      {"alice", "ollie", plan9.DMDIR | 0555},
	"session/beta":       {"bob", "staff", plan9.DMDIR | 0555},
	"session/alpha/plan": {"alice", "ollie", 0600},
	"session/beta/plan":  {"bob", "staff", 0600},
	"session/alpha/name": {"alice", "ollie", 0444},
	"session/beta/name":  {"bob", "staff", 0444},
	"plan/id-1":          {"alice", "ollie", 0600},
	"plan/id-2":          {"bob", "staff", 0600},
}

// canonical names a path of the tree the way fuzzNodes does: session ids
// become names, ".." and "" are resolved.
func canonical(path []string) string {
	var out []string
	for _, e := range path {
		switch e {
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case "id-1":
			out = append(out, "alpha")
		case "id-2":
			out = append(out, "beta")
		default:
			out = append(out, e)
		}
	}
	return strings.Join(out, "/")
}

// oracle is who an attach must be, by the trust rules: the owner's
// peers are the admin whatever they claim; a sandboxed peer is the user
// its capability proves, except admin and none, which nothing proves;
// everyone else is none.
type oracle struct {
	user  string
	admin bool
}

func oracleFor(kind ns.PeerKind, uname, aname string) oracle {
	switch kind {
	case ns.Owner:
		return oracle{user: ns.Admin, admin: true}
	case ns.Sandboxed:
		if uname != "" && uname != ns.Admin && uname != ns.None && aname == key(uname) {
			return oracle{user: uname}
		}
	}
	return oracle{user: ns.None}
}

// may is Plan 9's access check: other, then owner, then group bits;
// group members are only those inGroup names (alice in staff), never a
// user named like the group; none never writes.
func (o oracle) may(owner, group string, mode plan9.Perm, want int) bool {
	if o.admin {
		return true
	}
	if o.user == ns.None && want&plan9.AWRITE != 0 {
		return false
	}
	m := int(mode & 0777)
	return want&m == want ||
		o.user == owner && want&(m>>6) == want ||
		inGroup(o.user, group) && want&(m>>3) == want
}

type fuzzFid struct {
	who    oracle
	path   []string
	open   bool
	reads  bool // opened for reading
	writes bool
}

// principalProgram interprets a fuzzer's input as ops on connections of
// the server, checking each outcome against the oracle.
type principalProgram struct {
	t    *testing.T
	w    *world
	srv  *ns.Server
	prog []byte

	kind ns.PeerKind
	r    *rawConn
	end  func()
	fids map[uint32]*fuzzFid
	tag  uint16
}

func (p *principalProgram) arg(n int) int {
	if len(p.prog) == 0 {
		return 0
	}
	b := p.prog[0]
	p.prog = p.prog[1:]
	return int(b) % n
}

const maxFuzzOps, maxFuzzConns, fuzzFids = 64, 4, 8

func (p *principalProgram) run() {
	defer func() {
		if p.end != nil {
			p.end()
		}
	}()
	conns := 0
	op := opConnect // the first byte is the first connection's kind
	for ops := 0; len(p.prog) > 0 && ops < maxFuzzOps; ops++ {
		if ops > 0 {
			op = p.arg(numOps)
		}
		switch op {
		case opConnect:
			kind := ns.PeerKind(p.arg(3))
			if conns++; conns > maxFuzzConns {
				return
			}
			if p.end != nil {
				p.end()
			}
			p.kind, p.fids = kind, map[uint32]*fuzzFid{}
			p.r, p.end = fuzzDial(p.t, p.srv, ns.Peer{Kind: kind, PID: 7, UID: 7})
			p.r.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"})
		case opAttach:
			p.attach(uint32(p.arg(fuzzFids)), fuzzUsers[p.arg(len(fuzzUsers))], p.arg(numCaps))
		case opWalk:
			p.walk(uint32(p.arg(fuzzFids)), uint32(p.arg(fuzzFids)), fuzzPaths[p.arg(len(fuzzPaths))])
		case opOpen:
			p.open(uint32(p.arg(fuzzFids)), uint8(p.arg(256)))
		case opRead:
			p.read(uint32(p.arg(fuzzFids)))
		case opWrite:
			p.write(uint32(p.arg(fuzzFids)), fuzzPayloads[p.arg(len(fuzzPayloads))])
		case opWstat:
			p.wstat(uint32(p.arg(fuzzFids)))
		case opClunk:
			fid := uint32(p.arg(fuzzFids))
			p.rpc(&plan9.Fcall{Type: plan9.Tclunk, Fid: fid})
			delete(p.fids, fid)
		}
	}
}

func (p *principalProgram) rpc(f *plan9.Fcall) *plan9.Fcall {
	p.tag = (p.tag + 1) % 1000
	f.Tag = p.tag
	return p.r.rpc(f)
}

// state is everything a write could change in the world.
func (p *principalProgram) state() string {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("counter %d writes %q notes %q plans %q", w.counter, w.writes, w.notes, w.plans)
}

// unchangedByNone runs op and fails if it was done as none and the
// world changed.
func (p *principalProgram) unchangedByNone(who oracle, op func()) {
	if who.user != ns.None {
		op()
		return
	}
	before := p.state()
	op()
	if after := p.state(); after != before {
		p.t.Fatalf("none changed the world:\nbefore %s\nafter  %s", before, after)
	}
}

func (p *principalProgram) attach(fid uint32, user string, capa int) {
	aname := ""
	switch capa {
	case capOwn:
		aname = key(user)
	case capOther:
		aname = key(user + "x")
	case capJunk:
		aname = "key-"
	}
	f := p.rpc(&plan9.Fcall{Type: plan9.Tattach, Fid: fid, Afid: plan9.NOFID, Uname: user, Aname: aname})
	if f.Type != plan9.Rattach {
		return
	}
	want := oracleFor(p.kind, user, aname)
	p.fids[fid] = &fuzzFid{who: want}
	// The server's idea of who this is, as handlers see it.
	const probe = fuzzFids + 1
	if f := p.rpc(&plan9.Fcall{Type: plan9.Twalk, Fid: fid, Newfid: probe, Wname: []string{"whoami"}}); f.Type != plan9.Rwalk {
		p.t.Fatalf("%s attached as %q with aname %q: walk to whoami: %v", p.kind, user, aname, f)
	}
	defer p.rpc(&plan9.Fcall{Type: plan9.Tclunk, Fid: probe})
	if f := p.rpc(&plan9.Fcall{Type: plan9.Topen, Fid: probe, Mode: plan9.OREAD}); f.Type != plan9.Ropen {
		p.t.Fatalf("open whoami: %v", f)
	}
	got := p.rpc(&plan9.Fcall{Type: plan9.Tread, Fid: probe, Count: 100})
	if w := fmt.Sprintf("%s admin=%v\n", want.user, want.admin); string(got.Data) != w {
		p.t.Fatalf("%s peer attached as %q with aname %q is %q, want %q", p.kind, user, aname, got.Data, w)
	}
}

func (p *principalProgram) walk(fid, newfid uint32, path string) {
	from := p.fids[fid]
	var names []string
	if path != "" {
		names = strings.Split(path, "/")
	}
	f := p.rpc(&plan9.Fcall{Type: plan9.Twalk, Fid: fid, Newfid: newfid, Wname: names})
	if from == nil || f.Type != plan9.Rwalk || len(f.Wqid) < len(names) {
		return
	}
	// Every directory passed through must let the principal search it.
	full := append(append([]string(nil), from.path...), names...)
	for i := range names {
		dir := canonical(full[:len(from.path)+i])
		if n, ok := fuzzNodes[dir]; ok && !from.who.may(n.owner, n.group, n.mode, plan9.AEXEC) {
			p.t.Fatalf("%s walked %q from /%s through /%s, whose mode %#o (%s:%s) denies it search",
				from.who.user, path, strings.Join(from.path, "/"), dir, n.mode, n.owner, n.group)
		}
	}
	p.fids[newfid] = &fuzzFid{who: from.who, path: full}
}

func (p *principalProgram) open(fid uint32, mode uint8) {
	st := p.fids[fid]
	var f *plan9.Fcall
	run := func() { f = p.rpc(&plan9.Fcall{Type: plan9.Topen, Fid: fid, Mode: mode}) }
	if st == nil {
		run()
		return
	}
	p.unchangedByNone(st.who, run)
	if f.Type != plan9.Ropen {
		return
	}
	want := 0
	switch mode & 3 {
	case plan9.OREAD:
		want = plan9.AREAD
	case plan9.OWRITE:
		want = plan9.AWRITE
	case plan9.ORDWR:
		want = plan9.AREAD | plan9.AWRITE
	case plan9.OEXEC:
		want = plan9.AEXEC
	}
	if mode&plan9.OTRUNC != 0 {
		want |= plan9.AWRITE
	}
	name := canonical(st.path)
	if n, ok := fuzzNodes[name]; ok && !st.who.may(n.owner, n.group, n.mode, want) {
		p.t.Fatalf("%s opened /%s with mode %#x, which its mode %#o (%s:%s) denies", st.who.user, name, mode, n.mode, n.owner, n.group)
	}
	st.open = true
	st.reads = want&(plan9.AREAD|plan9.AEXEC) != 0
	st.writes = want&plan9.AWRITE != 0
}

// blocking are the files whose reads wait for something this program
// never does; FuzzServe covers them.
var blocking = map[string]bool{"log": true, "trim": true, "wait": true, "event": true}

func (p *principalProgram) read(fid uint32) {
	st := p.fids[fid]
	if st == nil || !st.open || !st.reads || blocking[canonical(st.path)] {
		return
	}
	p.unchangedByNone(st.who, func() { p.rpc(&plan9.Fcall{Type: plan9.Tread, Fid: fid, Count: 512}) })
}

func (p *principalProgram) write(fid uint32, data string) {
	st := p.fids[fid]
	if st == nil {
		p.rpc(&plan9.Fcall{Type: plan9.Twrite, Fid: fid, Data: []byte(data)})
		return
	}
	var f *plan9.Fcall
	p.unchangedByNone(st.who, func() { f = p.rpc(&plan9.Fcall{Type: plan9.Twrite, Fid: fid, Data: []byte(data)}) })
	if f.Type == plan9.Rwrite && !st.writes {
		p.t.Fatalf("%s wrote /%s on a fid not opened for writing", st.who.user, canonical(st.path))
	}
}

func (p *principalProgram) wstat(fid uint32) {
	st := p.fids[fid]
	d := &plan9.Dir{Type: ^uint16(0), Dev: ^uint32(0), Mode: ^plan9.Perm(0), Atime: ^uint32(0), Mtime: ^uint32(0), Length: 0,
		Qid: plan9.Qid{Path: ^uint64(0), Vers: ^uint32(0), Type: ^uint8(0)}}
	stat, err := d.Bytes()
	if err != nil {
		p.t.Fatal(err)
	}
	f := p.rpc(&plan9.Fcall{Type: plan9.Twstat, Fid: fid, Stat: stat})
	if st == nil || f.Type != plan9.Rwstat {
		return
	}
	name := canonical(st.path)
	if n, ok := fuzzNodes[name]; ok && !st.who.may(n.owner, n.group, n.mode, plan9.AWRITE) {
		p.t.Fatalf("%s truncated /%s, which its mode %#o (%s:%s) denies it", st.who.user, name, n.mode, n.owner, n.group)
	}
}
