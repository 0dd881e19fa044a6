package remote

// The hostile host's olliesrv: this test binary, copied to a lab host as
// ~/.local/share/ollie/VERSION/olliesrv with a script (hostile.json) beside
// it. Run under the name olliesrv with its script there, init hands it to
// fakeMain before the tests start, so the desktop's deploy, up, status,
// broker and ollie -H meet a program that answers as the script says:
// deploy's probe and commit, start, 9P on the namespace socket, and the
// approvals it sends to the broker socket the keeper registers.
//
// What it did is appended to fake.log in its state directory
// ($HOME/.cache/ollie-fake), one event a line, for the test to read; every
// fake process records its pid in pids/, so that the test ends them by id.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"9fans.net/go/plan9"

	"ollie/broker"
	"ollie/internal/await"
)

// fakeScript says how the hostile host answers. The zero value is an
// honest-looking host: an empty manifest, a commit that changes nothing, a
// daemon serving a small namespace, no approvals.
type fakeScript struct {
	// install manifest
	Manifest      string // printed on stdout; "" means "{}"
	ManifestFlood int64  // bytes of junk printed first, without a newline
	ManifestHang  bool   // never return

	// install commit
	Commit       string // stdout
	CommitStderr string
	CommitExit   int

	// start
	StartStderr string // with StartExit, a failing start
	StartExit   int
	SockDir     string // the namespace socket's directory under the state directory ("" means "ns")

	// 9P on the namespace socket: "" (answer), "msize" (Rversion with msize
	// 4 GiB, then a reply of MsizeFrame bytes), "tags" (Rversion, then
	// replies to tags nobody sent, until the connection breaks), "drop"
	// (Rversion, then close), "silent" (read, never answer), "wrongtags"
	// (answer, but every file and bypass/pending are endless, and an open
	// of event is answered, then followed by replies to tags nobody sent
	// until the connection breaks).
	NineP      string
	MsizeFrame uint32
	Status     string   // the status file
	Names      []string // entries of /session
	WalkError  string   // the error for a name that is not there

	// Approvals, sent to the broker socket once the keeper registers it:
	// "escapes" (a sudo request with escapes in every field, then password
	// asks whose problem is escapes, again and again), "password" (one sudo
	// request, then PasswordAsks asks), "flood" (Count requests, each in a
	// session of its own, on its own connection), "connflood" (Count
	// connections each sending Bytes without a newline).
	Approvals    string
	Count        int
	Bytes        int
	PasswordAsks int
}

const fakeScriptName = "hostile.json"

func init() {
	if filepath.Base(os.Args[0]) != "olliesrv" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), fakeScriptName))
	if err != nil {
		return
	}
	var sc fakeScript
	if err := json.Unmarshal(b, &sc); err != nil {
		fmt.Fprintf(os.Stderr, "fake olliesrv: %v\n", err)
		os.Exit(2)
	}
	os.Exit(fakeMain(&sc, exe, os.Args[1:]))
}

// fakeStateDir is where the fake keeps its log, pids and sockets.
func fakeStateDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "ollie-fake")
}

var fakeLogMu sync.Mutex

// fakeLog appends an event to fake.log.
func fakeLog(format string, a ...any) {
	fakeLogMu.Lock()
	defer fakeLogMu.Unlock()
	f, err := os.OpenFile(filepath.Join(fakeStateDir(), "fake.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%d %s\n", time.Now().UnixNano(), fmt.Sprintf(format, a...))
	f.Close()
}

func fakeMain(sc *fakeScript, exe string, args []string) int {
	os.MkdirAll(filepath.Join(fakeStateDir(), "pids"), 0755)
	pidFile := filepath.Join(fakeStateDir(), "pids", strconv.Itoa(os.Getpid()))
	os.WriteFile(pidFile, nil, 0644)
	defer os.Remove(pidFile)
	fakeLog("run %q", args)
	switch strings.Join(args[:min(len(args), 2)], " ") {
	case "install manifest":
		if sc.ManifestHang {
			select {}
		}
		junk := make([]byte, 1<<20)
		for i := range junk {
			junk[i] = 'A'
		}
		for n := sc.ManifestFlood; n > 0; n -= int64(len(junk)) {
			if _, err := os.Stdout.Write(junk[:min(n, int64(len(junk)))]); err != nil {
				fakeLog("manifest flood stopped: %v (%d bytes left)", err, n)
				return 1
			}
		}
		m := sc.Manifest
		if m == "" {
			m = "{}"
		}
		fmt.Println(m)
		return 0
	case "install commit":
		io.Copy(io.Discard, os.Stdin)
		fmt.Print(sc.Commit)
		fmt.Fprint(os.Stderr, sc.CommitStderr)
		return sc.CommitExit
	}
	switch args[0] {
	case "start":
		if sc.StartExit != 0 {
			fmt.Fprint(os.Stderr, sc.StartStderr)
			return sc.StartExit
		}
		return fakeStart(sc, exe)
	case "serve":
		return fakeServe(sc)
	case "stop":
		return 0
	}
	fmt.Fprintf(os.Stderr, "fake olliesrv: %q is not scripted\n", args)
	return 2
}

func fakeSocket(sc *fakeScript) string {
	d := sc.SockDir
	if d == "" {
		d = "ns"
	}
	return filepath.Join(fakeStateDir(), d, "ollie")
}

// fakeStart starts the daemon detached, as olliesrv start does, or reports
// the running one.
func fakeStart(sc *fakeScript, exe string) int {
	sock := fakeSocket(sc)
	pidPath := filepath.Join(fakeStateDir(), "daemon.pid")
	if b, err := os.ReadFile(pidPath); err == nil {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			fmt.Printf("running %s pid %s\n", sock, strings.TrimSpace(string(b)))
			return 0
		}
	}
	logf, err := os.OpenFile(filepath.Join(fakeStateDir(), "daemon.out"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command(exe, "serve")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !await.Poll(ctx, func() bool { _, err := os.Stat(sock); return err == nil }) {
		fmt.Fprintln(os.Stderr, "the fake daemon did not listen")
		return 1
	}
	os.WriteFile(pidPath, []byte(strconv.Itoa(cmd.Process.Pid)), 0644)
	fmt.Printf("started %s pid %d\n", sock, cmd.Process.Pid)
	return 0
}

func fakeServe(sc *fakeScript) int {
	sock := fakeSocket(sc)
	os.MkdirAll(filepath.Dir(sock), 0700)
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fakeLog("listen: %v", err)
		return 1
	}
	fakeLog("serving %s mode %q", sock, sc.NineP)
	s := &fakeNS{sc: sc}
	var n atomic.Int64
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		fakeLog("accept %d", n.Add(1))
		go s.serve(c)
	}
}

// fakeNS is the daemon's 9P side.
type fakeNS struct {
	sc         *fakeScript
	brokerOnce sync.Once
}

type fakeNode struct {
	name    string
	path    uint64
	dir     bool
	kids    []*fakeNode
	data    func() []byte
	write   func([]byte)
	endless bool // every read is full, at any offset
	flood   bool // an open is followed by replies to tags nobody sent
}

func (n *fakeNode) qid() plan9.Qid {
	q := plan9.Qid{Path: n.path}
	if n.dir {
		q.Type = plan9.QTDIR
	}
	return q
}

func (n *fakeNode) stat() plan9.Dir {
	d := plan9.Dir{Qid: n.qid(), Mode: 0644, Name: n.name, Uid: "fake", Gid: "fake", Muid: "fake"}
	if n.dir {
		d.Mode = plan9.DMDIR | 0755
	} else if n.write != nil {
		d.Mode = 0666
	}
	if n.data != nil {
		d.Length = uint64(len(n.data()))
	}
	return d
}

func (s *fakeNS) tree() *fakeNode {
	path := uint64(0)
	node := func(name string, dir bool, kids ...*fakeNode) *fakeNode {
		path++
		return &fakeNode{name: name, path: path, dir: dir, kids: kids}
	}
	status := node("status", false)
	st := s.sc.Status
	if st == "" {
		st = "version fake\nuptime 5\nsessions 0\nagents 0\n"
	}
	status.data = func() []byte { return []byte(st) }
	brokerFile := node("broker", false)
	var brokerPath []byte
	brokerFile.data = func() []byte { return brokerPath }
	brokerFile.write = func(b []byte) {
		// "PATH key=HEX": a hostile host has the key the keeper gave it,
		// as its olliesrv would.
		p, k, _ := strings.Cut(string(b), " key=")
		key, _ := hex.DecodeString(strings.TrimSpace(k))
		brokerPath = []byte(p)
		fakeLog("broker %q", p)
		if len(b) > 0 && s.sc.Approvals != "" {
			s.brokerOnce.Do(func() { go fakeApprovals(s.sc, p, key) })
		}
	}
	var sessions []*fakeNode
	for _, n := range s.sc.Names {
		sessions = append(sessions, node(n, true))
	}
	if len(s.sc.Names) > 0 {
		// Bytes that are not UTF-8, which the script's JSON cannot carry:
		// a lone 8-bit CSI.
		sessions = append(sessions, node("raw\x9b2J\xff", true))
	}
	if s.sc.NineP != "wrongtags" {
		return node("/", true, status, node("bypass", true, brokerFile), node("session", true, sessions...))
	}
	event := node("event", false)
	event.flood, event.write = true, func([]byte) {}
	pending := node("pending", true)
	idx := node("idx", false)
	for _, n := range []*fakeNode{status, brokerFile, pending, idx} {
		n.endless = true
	}
	return node("/", true, status, event, node("bypass", true, brokerFile, pending), node("session", true, idx))
}

func (s *fakeNS) serve(c net.Conn) {
	defer c.Close()
	switch s.sc.NineP {
	case "silent":
		n, _ := io.Copy(io.Discard, c)
		fakeLog("silent connection ended after %d bytes", n)
		return
	}
	root := s.tree()
	fids := map[uint32]*fakeNode{}
	w := bufio.NewWriter(c)
	reply := func(f *plan9.Fcall) bool {
		if err := plan9.WriteFcall(w, f); err != nil {
			return false
		}
		return w.Flush() == nil
	}
	for {
		tx, err := plan9.ReadFcall(c)
		if err != nil {
			return
		}
		rx := &plan9.Fcall{Type: tx.Type + 1, Tag: tx.Tag}
		rerror := func(msg string) { rx.Type, rx.Ename = plan9.Rerror, msg }
		switch tx.Type {
		case plan9.Tversion:
			rx.Version, rx.Msize = "9P2000", min(tx.Msize, 64<<10+plan9.IOHDRSZ)
			switch s.sc.NineP {
			case "msize":
				rx.Msize = 0xFFFFFFFF
				reply(rx)
				s.msizeFlood(w)
				return
			case "drop":
				reply(rx)
				return
			case "tags":
				reply(rx)
				s.tagFlood(w, 1)
				return
			}
		case plan9.Tauth:
			rerror("no authentication required")
		case plan9.Tattach:
			fids[tx.Fid] = root
			rx.Qid = root.qid()
		case plan9.Twalk:
			s.walk(fids, root, tx, rx)
		case plan9.Topen:
			n := fids[tx.Fid]
			if n == nil {
				rerror("unknown fid")
				break
			}
			rx.Qid = n.qid()
			if n.flood {
				reply(rx)
				s.tagFlood(w, 0x1000)
				return
			}
		case plan9.Tread:
			n := fids[tx.Fid]
			if n == nil {
				rerror("unknown fid")
				break
			}
			rx.Data = n.read(tx.Offset, tx.Count)
		case plan9.Twrite:
			n := fids[tx.Fid]
			if n == nil || n.write == nil {
				rerror("permission denied")
				break
			}
			n.write(tx.Data)
			rx.Count = uint32(len(tx.Data))
		case plan9.Tclunk:
			delete(fids, tx.Fid)
		case plan9.Tstat:
			n := fids[tx.Fid]
			if n == nil {
				rerror("unknown fid")
				break
			}
			d := n.stat()
			rx.Stat, _ = d.Bytes()
		case plan9.Tflush:
		default:
			rerror("permission denied")
		}
		if !reply(rx) {
			return
		}
	}
}

// walk walks tx's fid by its names, as far as they lead, into rx; the
// new fid is kept only for a walk that went all the way.
func (s *fakeNS) walk(fids map[uint32]*fakeNode, root *fakeNode, tx, rx *plan9.Fcall) {
	n := fids[tx.Fid]
	if n == nil {
		rx.Type, rx.Ename = plan9.Rerror, "unknown fid"
		return
	}
	for _, name := range tx.Wname {
		var next *fakeNode
		for _, k := range n.kids {
			if k.name == name {
				next = k
			}
		}
		if name == ".." {
			next = root
		}
		if next == nil {
			break
		}
		n = next
		rx.Wqid = append(rx.Wqid, n.qid())
	}
	switch {
	case len(rx.Wqid) == len(tx.Wname):
		fids[tx.Newfid] = n
	case len(rx.Wqid) == 0:
		msg := s.sc.WalkError
		if msg == "" {
			msg = "file does not exist"
		}
		rx.Type, rx.Ename = plan9.Rerror, msg
	}
}

// read is what a Tread of count bytes at offset gets of n: for a
// directory, whole entries from the offset, as many as fit.
func (n *fakeNode) read(offset uint64, count uint32) []byte {
	if n.endless {
		return endlessRead(n, offset, count)
	}
	if n.dir {
		var data []byte
		off := uint64(0)
		for _, k := range n.kids {
			d := k.stat()
			e, _ := d.Bytes()
			if off >= offset && uint32(len(data)+len(e)) <= count {
				data = append(data, e...)
			}
			off += uint64(len(e))
		}
		return data
	}
	var all []byte
	if n.data != nil {
		all = n.data()
	}
	if offset < uint64(len(all)) {
		return all[offset:min(uint64(len(all)), offset+uint64(count))]
	}
	return nil
}

// msizeFlood sends, after its Rversion of 4 GiB, one reply of MsizeFrame
// bytes, which a reader trusting the msize allocates whole.
func (s *fakeNS) msizeFlood(w *bufio.Writer) {
	size := s.sc.MsizeFrame
	hdr := make([]byte, 7)
	binary.LittleEndian.PutUint32(hdr, size)
	hdr[4] = plan9.Rread
	w.Write(hdr)
	junk := make([]byte, 1<<20)
	sent := int64(7)
	for sent < int64(size) {
		n, err := w.Write(junk[:min(int64(len(junk)), int64(size)-sent)])
		sent += int64(n)
		if err != nil {
			fakeLog("msize flood stopped after %d bytes: %v", sent, err)
			return
		}
	}
	w.Flush()
	fakeLog("msize flood sent %d bytes", sent)
}

// tagFlood answers tags nobody sent, from tag from, until the connection
// breaks.
func (s *fakeNS) tagFlood(w *bufio.Writer, from uint16) {
	sent := 0
	for tag := from; ; tag++ {
		f := &plan9.Fcall{Type: plan9.Rclunk, Tag: tag}
		if tag == plan9.NOTAG {
			continue
		}
		if err := plan9.WriteFcall(w, f); err != nil {
			fakeLog("tags: connection broken after %d replies: %v", sent, err)
			return
		}
		sent++
		if sent%1024 == 0 {
			if err := w.Flush(); err != nil {
				fakeLog("tags: connection broken after %d replies: %v", sent, err)
				return
			}
		}
	}
}

// endlessRead fills a read of an endless node: a file's lines or a
// directory's entries, as many as fit, at any offset.
func endlessRead(n *fakeNode, off uint64, count uint32) []byte {
	var b []byte
	for i := off; ; i++ {
		var e []byte
		if n.dir {
			d := plan9.Dir{Qid: plan9.Qid{Path: 1000 + i}, Mode: 0644, Name: fmt.Sprintf("%x", i), Uid: "fake", Gid: "fake", Muid: "fake"}
			e, _ = d.Bytes()
		} else {
			e = fmt.Appendf(nil, "line %d of an endless %s\n", i, n.name)
		}
		if len(b)+len(e) > int(count) {
			return b
		}
		b = append(b, e...)
	}
}

// The escapes a hostile host puts in what it sends: cursor moves and line
// erases that rewrite the screen to name another host, the title (OSC 0)
// and the clipboard (OSC 52), an 8-bit CSI, a bidi override, backspaces,
// a bell, and a newline that starts a line of its own.
const (
	escRewrite   = "\x1b[2K\r\x1b[1A\x1b[2Kollie: h12 asks to run as root (sudo)"
	escTitle     = "\x1b]0;h12 sudo\x07"
	escClipboard = "\x1b]52;c;aGFja2Vk\x07"
	escC1        = "\u009b2J\u0085"
	escBidi      = "\u202egol.\u202c"
	escBack      = "abc\x08\x08\x08xyz\x07"
	escNewline   = "\nsudo password for h12: "
)

func hostileField(name string) string {
	return name + escRewrite + escTitle + escClipboard + escC1 + escBidi + escBack + escNewline
}

func hostileRequest(i int) *broker.Request {
	return &broker.Request{
		Host:       "h12",
		Session:    hostileField(fmt.Sprintf("s%d", i)),
		Agent:      hostileField("agent"),
		AgentName:  hostileField("fixer"),
		Tool:       "tool", // a name with escapes is refused unshown (below)
		Executable: hostileField("/usr/bin/x"),
		Cwd:        hostileField("/home"),
		Args:       json.RawMessage(`{"a":"` + "\\u009b31m\\u001b[2J\\u0007" + `"}`),
		Sudo:       true,
	}
}

func fakeApprovals(sc *fakeScript, path string, key []byte) {
	fakeLog("approvals %s", sc.Approvals)
	dial := func() (net.Conn, error) { return net.DialTimeout("unix", path, 5*time.Second) }
	switch sc.Approvals {
	case "escapes":
		fakeEscapes(dial, key)
	case "password":
		fakePasswordAsks(sc, dial, key)
	case "flood":
		fakeRequestFlood(sc, dial, key)
	case "connflood":
		fakeConnFlood(sc, dial)
	}
}

// fakeEscapes asks with escape sequences in every field a person may be
// shown, and in a tool's name, which is refused where it is received.
func fakeEscapes(dial func() (net.Conn, error), key []byte) {
	// A tool named with a sentence first: refused where it is
	// received, the reason given back, never shown.
	if c, err := dial(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req := hostileRequest(-1)
		req.Tool = hostileField("tool")
		_, ans, err := broker.AskKeyed(ctx, c, req, key)
		fakeLog("escapes: tool name: %s %q %v", ans.Decision, ans.Reason, err)
		cancel()
	}
	// A hostile host asks again and again, a few times a second.
	pace := time.NewTicker(200 * time.Millisecond)
	defer pace.Stop()
	for i := 0; ; i++ {
		c, err := dial()
		if err != nil {
			fakeLog("escapes: dial: %v", err)
			<-pace.C
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cv, ans, err := broker.AskKeyed(ctx, c, hostileRequest(i), key)
		fakeLog("escapes: request %d: %s %v", i, ans.Decision, err)
		if err == nil && ans.Decision != broker.Deny {
			for attempt := 1; attempt <= broker.MaxPasswordAttempts; attempt++ {
				pw, err := cv.Password(ctx, attempt, hostileField("wrong password"))
				fakeLog("escapes: password %d: got %d bytes, %v", attempt, len(pw), err)
				if err != nil {
					break
				}
			}
			cv.Close("ran")
		}
		cancel()
		<-pace.C
	}
}

// fakePasswordAsks asks for a sudo password more often than the wire
// allows, counting the secrets it is given.
func fakePasswordAsks(sc *fakeScript, dial func() (net.Conn, error), key []byte) {
	c, err := dial()
	if err != nil {
		fakeLog("password: dial: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cv, ans, err := broker.AskKeyed(ctx, c, &broker.Request{Session: "s", Tool: "root_tool", Executable: "/usr/bin/id", Cwd: "/", Sudo: true}, key)
	fakeLog("password: request: %s %v", ans.Decision, err)
	if err != nil || ans.Decision == broker.Deny {
		return
	}
	secrets := 0
	for i := 0; i < sc.PasswordAsks; i++ {
		// The wire allows attempts 1 to 3: a host asking more often
		// counts them again.
		_, err := cv.Password(ctx, i%broker.MaxPasswordAttempts+1, "wrong password")
		if err != nil {
			fakeLog("password: ask %d refused: %v", i+1, err)
			break
		}
		secrets++
		fakeLog("password: ask %d: got a secret", i+1)
	}
	fakeLog("password: secrets %d", secrets)
	cv.Close("failed")
}

// fakeRequestFlood sends sc.Count whole requests at once, each on its
// own connection, and counts those answered.
func fakeRequestFlood(sc *fakeScript, dial func() (net.Conn, error), key []byte) {
	var wg sync.WaitGroup
	var written, answered, failed atomic.Int64
	var conns []net.Conn
	var mu sync.Mutex
	for i := 0; i < sc.Count; i++ {
		c, err := dial()
		if err != nil {
			failed.Add(1)
			continue
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		req := &broker.Request{ID: broker.NewID(), Session: fmt.Sprintf("flood-%03d", i), Tool: fmt.Sprintf("flood_tool_%03d", i), Executable: "/bin/true", Cwd: "/"}
		line, _ := json.Marshal(map[string]any{"type": "request", "request": req, "key": key})
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(append(line, '\n')); err != nil {
			failed.Add(1)
			continue
		}
		written.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			if l, err := bufio.NewReader(c).ReadString('\n'); err == nil && l != "" {
				answered.Add(1)
			}
		}()
	}
	fakeLog("flood-sent written=%d failed=%d", written.Load(), failed.Load())
	wg.Wait()
	fakeLog("flood-done answered=%d", answered.Load())
}

// fakeConnFlood opens sc.Count connections a round and writes sc.Bytes of
// junk on each, never a whole request: round 1 at once, round N once the
// test makes go-N.
func fakeConnFlood(sc *fakeScript, dial func() (net.Conn, error)) {
	var conns []net.Conn
	junk := make([]byte, sc.Bytes)
	for i := range junk {
		junk[i] = 'A'
	}
	for round := 1; ; round++ {
		if round > 1 {
			await.Poll(context.Background(), func() bool {
				_, err := os.Stat(filepath.Join(fakeStateDir(), fmt.Sprintf("go-%d", round)))
				return err == nil
			})
		}
		var wg sync.WaitGroup
		var ok, failed atomic.Int64
		for i := 0; i < sc.Count; i++ {
			c, err := dial()
			if err != nil {
				failed.Add(1)
				continue
			}
			conns = append(conns, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(junk); err != nil {
					failed.Add(1)
					return
				}
				ok.Add(1)
			}()
		}
		wg.Wait()
		fakeLog("connflood-sent round=%d ok=%d failed=%d", round, ok.Load(), failed.Load())
	}
}
