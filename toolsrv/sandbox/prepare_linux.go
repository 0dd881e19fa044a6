package sandbox

import (
	"fmt"
	"os"
)

// A pre-started stage prepares, while it waits, the confinement of the
// call it expects: the pool sends it the policy of the session's last
// call without its per-call rules (the scratch directory's), and the
// stage builds its Landlock ruleset and sets its cgroup limits then. When
// the call comes with that policy, only the per-call rules and the
// tool's own are added to the ruleset; any other policy is built whole,
// as before.
//
// A rule holds the file its path named when the rule was made: Landlock
// keeps the inode, not the path. A path renamed or swapped for a link or
// another directory between the preparation and the call leaves the rule
// on the file it named before, and what now lies at the path gets
// nothing from it (TestPreparedRulesHoldTheirFiles). The call's
// directory is still found by its path at the call and checked against
// the session's (enterDir), and the protected paths' mounts are made at
// the call, as before.

// prepared is what a pre-started stage built ahead for the policy the
// pool expects its call to have.
type prepared struct {
	policy *Policy
	// rules holds policy's rules; nil when they could not be built ahead
	// (the call then builds them itself, and says why where they fail).
	rules *ruleset
	// limits are those the call's cgroups were given, nil for none.
	limits *Limits
}

// Limits below these are set only when the call comes: the waiting stage
// is a Go process in the call's cgroup, whose own threads and memory
// (a handful, a few MB) count against them.
const (
	prepareMinProcesses = 64
	prepareMinMemory    = 256 << 20
)

// prepare builds what it can ahead for the policy in data (JSON);
// cgDirs are the stage's cgroups (callCgroup.String) and ownProc says
// the stage has a /proc of its own.
func prepare(data []byte, cgDirs string, ownProc bool) *prepared {
	p, err := decodePolicy(data)
	if err != nil {
		return nil
	}
	prep := &prepared{policy: p}
	if rs, err := newRuleset(p); err == nil && rs != nil {
		if rs.addPaths(p.Paths, ownProc) == nil {
			prep.rules = rs
		} else {
			rs.close()
		}
	}
	l := p.Limits.effective()
	if cg := parseCallCgroup(cgDirs); cg != nil && l.Processes >= prepareMinProcesses && l.Memory >= prepareMinMemory {
		if cg.setLimits(l) == nil {
			prep.limits = &l
		}
	}
	return prep
}

// setCallLimits gives the call's cgroups (dirs as callCgroup.String
// wrote them, "-" for none) the policy's limits, unless prep gave them
// those already; where they could not be set it says on the call's
// stderr that they are not applied, as the cold path's helper does.
func setCallLimits(p *Policy, dirs string, prep *prepared) {
	cg := parseCallCgroup(dirs)
	if cg == nil {
		if len(callCgroupParents()) > 0 {
			fmt.Fprintln(os.Stderr, "sandbox: no cgroup was made for the call (the helper's error is in the log): running the tool without the call's cgroup limits")
		}
		return
	}
	l := p.Limits.effective()
	if prep != nil && prep.limits != nil && *prep.limits == l {
		return
	}
	if err := cg.setLimits(l); err != nil {
		fmt.Fprintf(os.Stderr, "%v: running the tool without the call's cgroup limits\n", err)
	}
}

// applyPrepared is apply for a call whose policy p is prep's with the
// per-call rules extra: those and the tool's are added to the ruleset
// built ahead. Without one (no preparation, or it failed), it is apply.
func applyPrepared(p *Policy, prep *prepared, extra []PathRule, tool string, ownProc bool) error {
	if prep == nil || prep.rules == nil {
		return apply(p, tool, ownProc)
	}
	rs := prep.rules
	defer rs.close()
	if err := rs.addPaths(extra, ownProc); err != nil {
		return err
	}
	return rs.restrict(tool)
}
