package ns_test

// The conformance suite, continued: who may open, read, write and wstat
// what, by the mode and owner of each file.

import (
	"slices"
	"testing"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"
)

func TestPermissions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	sock := serveUnix(t, srv)
	tcp := serveTCP(t, srv)
	users := map[string]*client.Fsys{
		// Sandboxed peers that prove who they are.
		"glenda": mountAgent(t, srv, "glenda", key("glenda")),
		"alice":  mountAgent(t, srv, "alice", key("alice")),
		"bob":    mountAgent(t, srv, "bob", key("bob")),
		// The owner is the admin under any name, its login name included.
		"unix/admin":  mount(t, "unix", sock, "admin"),
		"unix/empty":  mount(t, "unix", sock, ""),
		"unix/glenda": mount(t, "unix", sock, "glenda"),
		// Everyone else is none.
		"tcp/admin":  mount(t, "tcp", tcp, "admin"),
		"tcp/empty":  mount(t, "tcp", tcp, ""),
		"tcp/glenda": mount(t, "tcp", tcp, "glenda"),
		"pipe/admin": mountPipe(t, srv, "admin"),
		"pipe/alice": mountPipe(t, srv, "alice"),
		// A sandboxed peer is none without its proof, with another's, or
		// when what it proves is a name reserved for the server.
		"agent/nokey":  mountAgent(t, srv, "alice", ""),
		"agent/forged": mountAgent(t, srv, "alice", key("bob")),
		"agent/admin":  mountAgent(t, srv, "admin", key("admin")),
		"agent/none":   mountAgent(t, srv, "none", key("none")),
		// A group's name is no key to the group.
		"agent/staff": mountAgent(t, srv, "staff", key("staff")),
	}
	admins := []string{"unix/admin", "unix/empty", "unix/glenda"}
	nones := []string{"tcp/admin", "tcp/empty", "tcp/glenda", "pipe/admin", "pipe/alice", "agent/nokey", "agent/forged", "agent/admin", "agent/none"}
	const (
		R  = plan9.OREAD
		W  = plan9.OWRITE
		RW = plan9.ORDWR
	)
	tests := []struct {
		path string
		mode uint8
		ok   []string // the others are denied
	}{
		// other bits
		{"hello", R, slices.Concat([]string{"glenda", "alice", "bob", "agent/staff"}, admins, nones)},
		// none never writes, even where the mode lets everyone
		{"calc", RW, slices.Concat([]string{"glenda", "alice", "bob", "agent/staff"}, admins)},
		{"event", RW, slices.Concat([]string{"glenda", "alice", "bob", "agent/staff"}, admins)},
		{"event", R, slices.Concat([]string{"glenda", "alice", "bob", "agent/staff"}, admins, nones)},
		// owner and group bits (alice is in staff through InGroup)
		{"secret", R, slices.Concat([]string{"glenda", "alice"}, admins)},
		{"notes", W, slices.Concat([]string{"glenda"}, admins)},
		// group write only: not even the owner
		{"drop", W, slices.Concat([]string{"alice"}, admins)},
		// a closed directory stops the walk
		{"private/note", R, slices.Concat([]string{"glenda"}, admins)},
		// owner from the entry: session alpha is alice's, beta is bob's
		// with group staff from the entry
		{"session/alpha/plan", R, slices.Concat([]string{"alice"}, admins)},
		{"session/beta/plan", W, slices.Concat([]string{"bob"}, admins)},
	}
	for _, tt := range tests {
		for who, fs := range users {
			fid, err := fs.Open(tt.path, tt.mode)
			if fid != nil {
				fid.Close()
			}
			if want := slices.Contains(tt.ok, who); (err == nil) != want {
				t.Errorf("%s: open %s mode %d: err %v, want allowed=%v", who, tt.path, tt.mode, err, want)
			}
		}
	}

	// The denial names the file.
	_, err := users["bob"].Open("secret", R)
	wantErr(t, err, "secret: permission denied")

	// Handlers see who asks.
	for who, want := range map[string]string{
		"unix/admin":   "admin admin=true\n",
		"unix/empty":   "admin admin=true\n",
		"unix/glenda":  "admin admin=true\n",
		"tcp/admin":    "none admin=false\n",
		"tcp/glenda":   "none admin=false\n",
		"pipe/admin":   "none admin=false\n",
		"agent/forged": "none admin=false\n",
		"agent/admin":  "none admin=false\n",
		"alice":        "alice admin=false\n",
	} {
		if got := readFile(t, users[who], "whoami"); got != want {
			t.Errorf("%s: whoami = %q, want %q", who, got, want)
		}
	}
}

func TestOwnership(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	tests := []struct {
		path, uid, gid string
		mode           plan9.Perm
	}{
		{"", "glenda", "ollie", plan9.DMDIR | 0555},
		{"hello", "glenda", "ollie", 0444},
		{"secret", "glenda", "staff", 0440},
		{"private", "glenda", "ollie", plan9.DMDIR | 0700},
		{"private/note", "glenda", "ollie", 0444},
		{"session/alpha", "alice", "ollie", plan9.DMDIR | 0555},
		{"session/alpha/plan", "alice", "ollie", 0600},
		{"session/beta", "bob", "staff", plan9.DMDIR | 0555},
		{"session/beta/plan", "bob", "staff", 0600},
		{"session/id-2/name", "bob", "staff", 0444},
	}
	for _, tt := range tests {
		d := stat(t, fs, tt.path)
		if d.Uid != tt.uid || d.Gid != tt.gid || d.Mode != tt.mode || d.Muid != tt.uid {
			t.Errorf("stat %q: uid %q gid %q muid %q mode %v; want %q %q %q %v", tt.path, d.Uid, d.Gid, d.Muid, d.Mode, tt.uid, tt.gid, tt.uid, tt.mode)
		}
	}
	if d := stat(t, fs, ""); d.Name != "/" {
		t.Errorf("root is named %q", d.Name)
	}
}

func TestWstat(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mountAgent(t, newServer(w), "glenda", key("glenda"))
	var d plan9.Dir
	d.Null()
	d.Length = 0
	if err := fs.Wstat("notes", &d); err != nil {
		t.Errorf("truncating wstat: %v", err)
	}
	d.Null()
	d.Name = "renamed"
	wantErr(t, fs.Wstat("notes", &d), "notes: wstat prohibited")
	d.Null()
	d.Length = 0
	wantErr(t, fs.Wstat("hello", &d), "hello: wstat prohibited")
	d.Null()
	if err := fs.Wstat("hello", &d); err != nil {
		t.Errorf("a null wstat (sync): %v", err)
	}
}

// TestUnopenedFid reads fids that were walked to but never opened. srv9p
// lets the read through (an unopened fid's mode, -1, looks like OEXEC), so
// it is for ns to refuse: the permission check is at open.
func TestUnopenedFid(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "bob")
	for i, name := range []string{"hello", "secret", "log", "wait", "calc", "event", "session"} {
		fid := uint32(i + 1)
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid, Wname: []string{name}})
		r.fail(&plan9.Fcall{Type: plan9.Tread, Tag: 2, Fid: fid, Count: 100}, "not open for read")
		r.fail(&plan9.Fcall{Type: plan9.Twrite, Tag: 2, Fid: fid, Data: []byte("x")}, "not open for write")
	}
	if len(w.waitIn) != 0 {
		t.Errorf("the wait handler ran for an unopened fid")
	}
}
