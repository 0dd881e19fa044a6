package ns

import "9fans.net/go/plan9"

// Access bits, as in Plan 9's access(2).
const (
	aExec  = plan9.AEXEC
	aWrite = plan9.AWRITE
	aRead  = plan9.AREAD
)

// A principal is the identity a connection attached as.
type principal struct {
	user    string
	admin   bool
	inGroup func(user, group string) bool
}

// may reports whether p may access a file with the given owner, group and
// mode for want (a mask of aRead, aWrite, aExec): other bits first, then
// owner bits for the owner, then group bits for members, as Plan 9 does.
func (p principal) may(owner, group string, mode plan9.Perm, want int) bool {
	if p.admin {
		return true
	}
	m := int(mode & 0777)
	if want&m == want {
		return true
	}
	if owner == p.user && want&(m>>6) == want {
		return true
	}
	if (group == p.user || (p.inGroup != nil && p.inGroup(p.user, group))) && want&(m>>3) == want {
		return true
	}
	return false
}

func (p principal) mayElem(e elem, want int) bool {
	return p.may(e.owner, e.group, e.node.Mode, want)
}
