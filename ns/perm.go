package ns

import "9fans.net/go/plan9"

// Access bits, as in Plan 9's access(2).
const (
	aExec  = plan9.AEXEC
	aWrite = plan9.AWRITE
	aRead  = plan9.AREAD
)

// A principal is the identity a connection attached as (see trust.go).
type principal struct {
	user     string
	admin    bool
	readOnly bool // none: never writes, whatever the mode says
	inGroup  func(user, group string) bool
}

// may reports whether p may access a file with the given owner, group and
// mode for want (a mask of aRead, aWrite, aExec): other bits first, then
// owner bits for the owner, then group bits for members, as Plan 9 does.
// Membership comes from inGroup alone: a user whose name equals a group's
// is not thereby a member, or the group's name would be a key to it.
func (p principal) may(owner, group string, mode plan9.Perm, want int) bool {
	if p.admin {
		return true
	}
	if p.readOnly && want&aWrite != 0 {
		return false
	}
	m := int(mode & 0777)
	if want&m == want {
		return true
	}
	if owner == p.user && want&(m>>6) == want {
		return true
	}
	if p.inGroup != nil && p.inGroup(p.user, group) && want&(m>>3) == want {
		return true
	}
	return false
}

func (p principal) mayElem(e elem, want int) bool {
	return p.may(e.owner, e.group, e.node.Mode, want)
}
