package ns

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"9fans.net/go/plan9"
)

// Help renders the tree as a reference: one line per file and directory
// with its path, mode, kind and documentation.
func (t *Tree) Help() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "PATH\tMODE\tKIND\tPURPOSE")
	for _, n := range t.nodes[1:] {
		path := n.Path()
		if n.dir {
			path += "/"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", path, modeString(n.Mode), n.kind(), n.Doc)
	}
	w.Flush()
	return b.String()
}

// kind names how a file is used, in the words of the package doc.
func (n *Node) kind() string {
	var k []string
	switch {
	case n.dir && n.Each != nil:
		return "dynamic dir"
	case n.dir:
		return "dir"
	case n.RdWr != nil:
		return "rdwr"
	}
	if n.Read != nil {
		k = append(k, "read")
	}
	if n.Stream != nil {
		k = append(k, "stream")
	}
	if n.Wait != nil {
		k = append(k, "wait")
	}
	if n.Subscribe != nil {
		k = append(k, "subscribe")
	}
	if n.Write != nil {
		k = append(k, "write")
	}
	return strings.Join(k, "+")
}

// modeString renders a mode as ls does: d then rwx for owner, group, other.
func modeString(m plan9.Perm) string {
	const rwx = "rwxrwxrwx"
	b := []byte("-" + strings.Repeat("-", 9))
	if m&plan9.DMDIR != 0 {
		b[0] = 'd'
	}
	for i := 0; i < 9; i++ {
		if m&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	return string(b)
}
