// Package ns serves a declared tree of files as a 9P2000 file system.
//
// The tree is data: every file and directory is a [Node] with a name, a
// mode, an owner and group (inherited from the parent when unset), a line of
// documentation and the handlers that give it content. The server (its own
// request loop on 9fans.net/go/plan9's message codec, loop.go) walks the
// tree, checks permissions on every walk and open, and turns each file
// kind into 9P reads and writes:
//
//   - Read: a snapshot taken at open, read by offset.
//   - Write: each Twrite is one request to the handler.
//   - RdWr: write a request, read the response on the same open fid.
//   - Stream: an offset-addressed byte stream; a read at the end blocks
//     until more data arrives or the stream ends.
//   - Wait: the first read blocks until the handler returns (the next
//     change), then the result is read to EOF.
//   - Subscribe: write a filter, then read matching items as they come.
//
// Directories whose children come from live state are declared with [Each];
// an entry may be reached by its visible name or by invisible aliases (an
// immutable ID), and both resolve to the same node with the same qid.
//
// The package trusts the handlers it is given and nothing that arrives on a
// connection: limits on msize, fids, outstanding requests and buffered bytes
// bound what one client can make the server hold.
package ns

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"9fans.net/go/plan9"

	"ollie/ns/stream"
)

// A Node declares one file or directory of the namespace.
//
// The handler fields give a file its content. What follows holds for each
// of them, and for [Each]'s List and Lookup; each field's comment says when
// it runs.
//
// A handler runs only for a request the file's mode permits the attached
// principal: a walk needs search (exec) permission on each directory, an
// open needs read or write permission for its mode, and a write or read
// needs the fid open for it. Handlers check what mode bits cannot say.
//
// Handlers run concurrently. A request whose handler may block is served
// in a goroutine of its own (the rest are answered on their connection's
// goroutine, in order), so a handler may run alongside any other, and
// alongside itself for other fids of the same file and for other
// connections. On
// one fid, the handlers that run at open (Read, Stream, List, a Subscribe
// at open) run once, before any read or write of the fid; Write, RdWr,
// Wait, a Subscribe at a read or write, and the Source's Next run one at
// a time, in no set order among requests outstanding together (a client
// that wants an order waits for each reply before sending the next);
// reads of a Read snapshot or of a Stream are not serialised at all, and
// neither is Lookup, which runs at walks and stats.
//
// ctx is the request's. It is done when the client flushes the request
// (Tflush), when the connection ends, when [Server.Shutdown] interrupts
// it (context.Cause(ctx) is then [ErrServerClosed]), and in any case once
// the handler returns, so nothing may keep it beyond the call. A handler
// that blocks must return soon after ctx is done: the server answers a
// Tflush only after the flushed request's own reply, Shutdown waits for running
// handlers, and a request's bytes count against the server's limits
// until it is answered. A handler that completes its work regardless of
// ctx may return success, and the client gets it.
//
// A handler's error becomes the Rerror answering its request. 9P carries
// errors as text, so the client sees err.Error() and nothing else: no
// type, nothing wrapped. Say which file (Call.Path) and why. Three
// answers are the server's, not the handler's:
//   - An error returned once ctx is done is answered "interrupted", or
//     "interrupted: server shutting down" after Shutdown, so that a client
//     can tell an interruption from a failure.
//   - A panic is recovered and logged with its stack to Server.Log, and
//     answered "ns: internal error".
//   - A text too long for the connection's msize, or for a 9P string
//     (64 KiB), is clipped, ending in "...".
//
// A handler owns the bytes it is given, a copy of the Twrite's data, and
// may keep them. The server keeps the bytes a handler returns and serves
// reads from them until the fid is clunked (or a later write or item
// replaces them), and never writes into them: the handler must not change
// them after returning, and may return bytes shared with other calls.
type Node struct {
	Name  string     // "{param}" for the template of an Each directory
	Mode  plan9.Perm // permission bits; DMDIR is implied for directories
	Owner string     // empty: inherited from the parent (or the entry, under Each)
	Group string     // empty: inherited from the parent (or the entry, under Each)
	Doc   string     // one line for help

	// Handlers. A file has at least one; a directory has none.

	// Read returns the file's content. It runs at each Topen for reading
	// (OREAD, ORDWR or OEXEC); its error fails the open. The fid keeps
	// that snapshot and serves every read by offset without calling Read
	// again, and Tstat reports its length: fresh content takes a new
	// open.
	Read func(ctx context.Context, c *Call) ([]byte, error)

	// Write takes one request. It runs once for each Twrite on a fid
	// opened for writing, with that Twrite's data; the offset is
	// ignored. On success the whole Twrite counts as written. A client
	// writes more than the fid's iounit (msize less 24 bytes) as several
	// Twrites, which Write sees as several requests. A write does not
	// change the Read snapshot of a fid already open.
	Write func(ctx context.Context, c *Call, data []byte) error

	// RdWr answers a request on the same fid. Each Twrite calls it with
	// the data written (the offset is ignored), and its reply replaces
	// the fid's last one; the reads that follow take the reply in order
	// from its start, ignoring their offsets, and then 0 bytes. A fid
	// must be opened for writing, ORDWR to read the reply. Reading before
	// any write, or after a write whose RdWr failed, is an error: a
	// failed request leaves no reply behind.
	RdWr func(ctx context.Context, c *Call, req []byte) ([]byte, error)

	// Stream returns the stream a fid reads. It runs at each Topen for
	// reading, and its ctx ends when the open does, so the stream must
	// not depend on it; many opens may share one stream. Reads go to the
	// stream by offset: at its end a read blocks until more is written,
	// the stream is closed (0 bytes: end of file) or the read's ctx is
	// done; an offset no longer retained or past the end is an error.
	Stream func(ctx context.Context, c *Call) (*stream.Stream, error)

	// Wait blocks until the next change and returns what to read then.
	// It runs at the first Tread of an open fid, not at the open; the
	// fid keeps the result and serves it by offset to that read and
	// those that follow, without calling Wait again, so waiting again
	// takes a new open. If Wait fails, flushed or not, the next read
	// calls it again. On a file with Subscribe too, a fid that a filter
	// was written to reads the subscription instead.
	Wait func(ctx context.Context, c *Call) ([]byte, error)

	// Subscribe starts a subscription to the items that match filter.
	// On a file without Write, it runs at each Twrite, with the data
	// written as the filter, and the new subscription replaces (and
	// closes) the fid's last one. On a file with no other read handler,
	// it also runs with a nil filter: at a Topen for reading only, and
	// that fid then reads one item and end of file; and at the first
	// Tread of a fid opened ORDWR that no filter was written to. Reads
	// take the items in turn, ignoring their offsets, and call the
	// Source's Next (with the read's ctx) once the last item has been
	// read; a read returns bytes of one item at most, and 0 bytes once
	// Next has returned io.EOF.
	Subscribe func(ctx context.Context, c *Call, filter []byte) (Source, error)

	// Children of a directory. At most one child may carry Each: its
	// instances are listed after the static children.
	Children []*Node
	Each     *Each

	parent       *Node
	index        uint64
	dir          bool
	inheritOwner bool // Owner was unset: an instance above may set it
	inheritGroup bool
}

// Each makes a Node the template of a dynamic directory: one instance per
// entry of live state, each with the template's children.
//
// List and Lookup are handlers as [Node] describes them; c is the
// directory's Call, so c.Key names the instances it sits under.
// [Listing] builds both from a function that returns the live items.
type Each struct {
	// List returns the visible entries, in the order to list them. It
	// runs at each Topen of the directory, after its static children
	// are listed; its error fails the open. The fid reads that listing
	// without calling List again.
	List func(ctx context.Context, c *Call) ([]Entry, error)

	// Lookup resolves a visible name or an invisible alias to its entry,
	// or reports false, and the walk then fails with "file does not
	// exist". It runs for each name walked in the directory that is not
	// the name of a static child (a static child hides an entry of its
	// name); the name is whatever the client sent, but never "", "." or
	// "..". It also runs at each Tstat of an instance, with the
	// instance's Key, to report its current name: every Key must
	// resolve.
	Lookup func(ctx context.Context, c *Call, name string) (Entry, bool)
}

// An Entry is one instance of an Each directory.
type Entry struct {
	Name  string // the visible name
	Key   string // the immutable identity handlers see through Call.Key
	Owner string // empty: the template's owner
	Group string // empty: the template's group
}

// A Source yields the items of a subscription. Next blocks until an item is
// available, ctx is done (it then returns ctx's error), or the source ends
// (io.EOF); the server keeps the item it returns, as [Node] says of the
// bytes a handler returns. Close runs when a write replaces the
// subscription, or once the fid is clunked (or its connection ends) and
// every request on it has ended. It never runs during a Next of the same
// fid, and it should not block: the reply to the request that lets the
// fid go waits for it.
type Source interface {
	Next(ctx context.Context) ([]byte, error)
	Close() error
}

// Dir declares a directory.
func Dir(name string, mode plan9.Perm, doc string, children ...*Node) *Node {
	return &Node{Name: name, Mode: mode, Doc: doc, Children: children, dir: true}
}

// Dynamic declares the template of a dynamic directory: "{param}" names the
// key handlers read with Call.Key(param).
func Dynamic(param string, mode plan9.Perm, doc string, each *Each, children ...*Node) *Node {
	return &Node{Name: "{" + param + "}", Mode: mode, Doc: doc, Each: each, Children: children, dir: true}
}

// ReadFile declares a file whose content is a snapshot taken at open.
func ReadFile(name string, mode plan9.Perm, doc string, fn func(context.Context, *Call) ([]byte, error)) *Node {
	return &Node{Name: name, Mode: mode, Doc: doc, Read: fn}
}

// WriteFile declares a file where each write is a request.
func WriteFile(name string, mode plan9.Perm, doc string, fn func(context.Context, *Call, []byte) error) *Node {
	return &Node{Name: name, Mode: mode, Doc: doc, Write: fn}
}

// RdWrFile declares a request/response file.
func RdWrFile(name string, mode plan9.Perm, doc string, fn func(context.Context, *Call, []byte) ([]byte, error)) *Node {
	return &Node{Name: name, Mode: mode, Doc: doc, RdWr: fn}
}

// StreamFile declares a streaming file.
func StreamFile(name string, mode plan9.Perm, doc string, fn func(context.Context, *Call) (*stream.Stream, error)) *Node {
	return &Node{Name: name, Mode: mode, Doc: doc, Stream: fn}
}

// WaitFile declares a file whose first read blocks until the next change.
func WaitFile(name string, mode plan9.Perm, doc string, fn func(context.Context, *Call) ([]byte, error)) *Node {
	return &Node{Name: name, Mode: mode, Doc: doc, Wait: fn}
}

// IsDir reports whether n declares a directory. A node with Each and a
// file handler is a dynamic file: one file per entry.
func (n *Node) IsDir() bool {
	return n.dir || n.Children != nil || (n.Each != nil && !n.hasHandlers())
}

func (n *Node) hasHandlers() bool {
	return n.Read != nil || n.Write != nil || n.RdWr != nil || n.Stream != nil || n.Wait != nil || n.Subscribe != nil
}

// DynamicFile declares one file per entry of live state: "{param}" names
// the key handlers read with Call.Key(param). f gives the handlers.
func DynamicFile(param string, mode plan9.Perm, doc string, each *Each, f *Node) *Node {
	f.Name, f.Mode, f.Doc, f.Each = "{"+param+"}", mode, doc, each
	return f
}

// Path is n's slash-separated path from the root, with "{param}" for
// dynamic levels.
func (n *Node) Path() string {
	if n.parent == nil {
		return "/"
	}
	var elems []string
	for m := n; m.parent != nil; m = m.parent {
		elems = append(elems, m.Name)
	}
	var b strings.Builder
	for i := len(elems) - 1; i >= 0; i-- {
		b.WriteString(elems[i])
		if i > 0 {
			b.WriteByte('/')
		}
	}
	return b.String()
}

// ErrBadTree reports a declaration mistake found by NewTree.
var ErrBadTree = errors.New("ns: bad tree")

// A Tree is a checked namespace declaration, ready to serve.
type Tree struct {
	Root  *Node
	nodes []*Node
}

// NewTree checks the declaration rooted at root, fills in inherited owners
// and groups (defaulting to owner and group at the root), and indexes the
// nodes for qids.
func NewTree(root *Node, owner, group string) (*Tree, error) {
	t := &Tree{Root: root}
	root.dir = true
	if root.Owner == "" {
		root.Owner = owner
	}
	if root.Group == "" {
		root.Group = group
	}
	if err := t.index(root, nil); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tree) index(n, parent *Node) error {
	n.parent = parent
	n.index = uint64(len(t.nodes))
	t.nodes = append(t.nodes, n)
	where := n.Path()
	if parent != nil {
		if n.Name == "" || n.Name == "." || n.Name == ".." || strings.ContainsAny(n.Name, "/\x00") {
			return fmt.Errorf("%w: %s: invalid name %q", ErrBadTree, parent.Path(), n.Name)
		}
		if n.Owner == "" {
			n.Owner, n.inheritOwner = parent.Owner, true
		}
		if n.Group == "" {
			n.Group, n.inheritGroup = parent.Group, true
		}
	}
	handlers := 0
	for _, set := range []bool{n.Read != nil, n.Write != nil, n.RdWr != nil, n.Stream != nil, n.Wait != nil, n.Subscribe != nil} {
		if set {
			handlers++
		}
	}
	if n.IsDir() {
		n.dir = true
		if handlers > 0 {
			return fmt.Errorf("%w: %s: a directory has no file handlers", ErrBadTree, where)
		}
		if n.Mode&0777 == 0 && n.Mode&plan9.DMDIR == 0 {
			n.Mode |= 0555
		}
		n.Mode |= plan9.DMDIR
	} else {
		if handlers == 0 {
			return fmt.Errorf("%w: %s: a file needs a handler", ErrBadTree, where)
		}
		if n.RdWr != nil && (n.Read != nil || n.Write != nil || n.Stream != nil) {
			return fmt.Errorf("%w: %s: an rdwr file has no other read or write handler", ErrBadTree, where)
		}
		if n.Stream != nil && (n.Read != nil || n.Wait != nil) {
			return fmt.Errorf("%w: %s: a stream has no other read handler", ErrBadTree, where)
		}
	}
	if n.Each != nil {
		if n.Children != nil && n.hasHandlers() {
			return fmt.Errorf("%w: %s: a dynamic file has no children", ErrBadTree, where)
		}
		if n.Each.List == nil || n.Each.Lookup == nil {
			return fmt.Errorf("%w: %s: Each needs List and Lookup", ErrBadTree, where)
		}
		if !strings.HasPrefix(n.Name, "{") || !strings.HasSuffix(n.Name, "}") {
			return fmt.Errorf("%w: %s: a dynamic directory is named {param}", ErrBadTree, where)
		}
	}
	seen := map[string]bool{}
	dynamic := 0
	for _, c := range n.Children {
		if seen[c.Name] {
			return fmt.Errorf("%w: %s: duplicate child %q", ErrBadTree, where, c.Name)
		}
		seen[c.Name] = true
		if c.Each != nil {
			dynamic++
		}
		if err := t.index(c, n); err != nil {
			return err
		}
	}
	if dynamic > 1 {
		return fmt.Errorf("%w: %s: at most one dynamic child", ErrBadTree, where)
	}
	return nil
}

// dynamicChild returns n's Each child, if any.
func (n *Node) dynamicChild() *Node {
	for _, c := range n.Children {
		if c.Each != nil {
			return c
		}
	}
	return nil
}

// staticChild returns n's child declared under name.
func (n *Node) staticChild(name string) *Node {
	for _, c := range n.Children {
		if c.Each == nil && c.Name == name {
			return c
		}
	}
	return nil
}
