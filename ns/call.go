package ns

import "strings"

// A Call is what a handler learns about the request: who asks, and which
// instance of each dynamic directory the file sits under.
type Call struct {
	User  string // the attached user name
	Admin bool   // the user is the admin principal (trusted transport only)
	path  []elem
	fid   *fidState // nil during walks
}

// OnClunk runs fn once the client closes the file this request came on, or
// its connection ends: an action such as shutting down can wait until its
// reply has been read. Outside an open file fn runs at once.
func (c *Call) OnClunk(fn func()) {
	if c.fid == nil {
		fn()
		return
	}
	c.fid.mu.Lock()
	c.fid.onClunk = append(c.fid.onClunk, fn)
	c.fid.mu.Unlock()
}

// elem is one step of a walked path: the declared node and, for an instance
// of an Each directory, the entry it stands for.
type elem struct {
	node  *Node
	entry Entry // zero unless node.Each != nil
	owner string
	group string
}

// Key returns the key of the enclosing instance of the dynamic directory
// declared as "{param}", or "" if the file is not under one.
func (c *Call) Key(param string) string {
	want := "{" + param + "}"
	for i := len(c.path) - 1; i >= 0; i-- {
		if c.path[i].node.Name == want {
			return c.path[i].entry.Key
		}
	}
	return ""
}

// Path returns the walked path, with visible names (or the names used to
// walk) for dynamic levels.
func (c *Call) Path() string { return pathString(c.path) }

func pathString(p []elem) string {
	var b strings.Builder
	for i, e := range p[1:] {
		if i > 0 {
			b.WriteByte('/')
		}
		if e.node.Each != nil {
			b.WriteString(e.entry.Name)
		} else {
			b.WriteString(e.node.Name)
		}
	}
	return b.String()
}

// child returns the elem for declared node n under parent p.
func child(p elem, n *Node) elem {
	e := elem{node: n, owner: n.Owner, group: n.Group}
	if n.inheritOwner {
		e.owner = p.owner // an instance above may have set it
	}
	if n.inheritGroup {
		e.group = p.group
	}
	return e
}

// instance returns the elem for entry ent of the Each template n under p.
func instance(p elem, n *Node, ent Entry) elem {
	e := child(p, n)
	e.entry = ent
	if ent.Owner != "" {
		e.owner = ent.Owner
	}
	if ent.Group != "" {
		e.group = ent.Group
	}
	return e
}
