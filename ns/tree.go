// Package ns serves a declared tree of files as a 9P2000 file system.
//
// The tree is data: every file and directory is a [Node] with a name, a
// mode, an owner and group (inherited from the parent when unset), a line of
// documentation and the handlers that give it content. The server built on
// 9fans.net/go/plan9/srv9p walks the tree, checks permissions on every walk
// and open, and turns each file kind into 9P reads and writes:
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
type Node struct {
	Name  string     // "{param}" for the template of an Each directory
	Mode  plan9.Perm // permission bits; DMDIR is implied for directories
	Owner string     // empty: inherited from the parent (or the entry, under Each)
	Group string     // empty: inherited from the parent (or the entry, under Each)
	Doc   string     // one line for help

	// Handlers. A file has at least one; a directory has none.
	Read      func(ctx context.Context, c *Call) ([]byte, error)
	Write     func(ctx context.Context, c *Call, data []byte) error
	RdWr      func(ctx context.Context, c *Call, req []byte) ([]byte, error)
	Stream    func(ctx context.Context, c *Call) (*stream.Stream, error)
	Wait      func(ctx context.Context, c *Call) ([]byte, error)
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
type Each struct {
	// List returns the visible entries, in the order to list them.
	List func(ctx context.Context, c *Call) ([]Entry, error)
	// Lookup resolves a visible name or an invisible alias to its entry.
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
// (io.EOF).
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
