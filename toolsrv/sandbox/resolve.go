package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Resolve fills in p's templates from v and returns the concrete policy.
// Paths that do not exist, or whose optional template has no value, are
// left out and listed in Policy.Skipped; a path may be given in several
// lists, and its rights add up. With v.TmpDir set, the rules only {TMPDIR}
// names are the call's own (PathRule.PerCall).
func (p *Profile) Resolve(v Vars) (*Policy, error) {
	r, err := p.ResolveCalls(v)
	if err != nil {
		return nil, err
	}
	return r.Policy(v.TmpDir), nil
}

// A Resolution is a profile resolved for the calls of one directory,
// which differ in their scratch directory alone: every path but those of
// {TMPDIR} is resolved once, and Policy resolves those for each call. It
// holds paths, as Resolve found them: the confining stage opens each
// without following a link, so a path that has become one since is
// refused, never followed. A path created, removed or linked elsewhere
// since is seen by the next resolution, so a caller that keeps one makes
// it again (off the call's path) rather than keeping it for good.
type Resolution struct {
	base *Policy
	vars Vars
	tmp  []tmpEntry // the {TMPDIR} entries
}

// A tmpEntry is a profile entry beginning with {TMPDIR}.
type tmpEntry struct {
	field, entry, rest string
	access             Access
}

// ResolveCalls resolves p for calls that differ in their scratch
// directory alone (see [Resolution]); v.TmpDir is not used.
func (p *Profile) ResolveCalls(v Vars) (*Resolution, error) {
	pol := &Policy{
		Profile:    p.Name,
		File:       p.File,
		Bind:       p.Bind,
		Connect:    p.Connect,
		Env:        slices.Clone(p.Env),
		Limits:     p.Limits,
		BestEffort: p.BestEffort,
	}
	res := &Resolution{base: pol, vars: v}
	access := map[string]Access{}
	lists := []struct {
		field   string
		entries []string
		access  Access
	}{{"read", p.Read, Read}, {"write", p.Write, Read | Write}, {"exec", p.Exec, Read | Exec}}
	for _, l := range lists {
		for i, entry := range l.entries {
			field := fmt.Sprintf("%s[%d]", l.field, i)
			tmpl, rest, err := splitTemplate(entry)
			if err != nil {
				return nil, &ProfileError{Kind: "sandbox", File: p.File, Field: field, Err: err}
			}
			if tmpl == "TMPDIR" {
				res.tmp = append(res.tmp, tmpEntry{field, entry, rest, l.access})
				continue
			}
			vals, reason, err := v.expand(tmpl)
			if err != nil {
				return nil, &ProfileError{Kind: "sandbox", File: p.File, Field: field, Err: err}
			}
			if reason != "" {
				pol.Skipped = append(pol.Skipped, Skipped{field, entry, "", reason})
				continue
			}
			for _, val := range vals {
				if path, skip := resolvePath(field, entry, val+rest); skip != nil {
					pol.Skipped = append(pol.Skipped, *skip)
				} else {
					access[path] |= l.access
				}
			}
		}
	}
	for path, a := range access {
		pol.Paths = append(pol.Paths, PathRule{Path: path, Access: a})
	}
	slices.SortFunc(pol.Paths, func(a, b PathRule) int { return strings.Compare(a.Path, b.Path) })
	return res, nil
}

// resolvePath is the canonical form of path, or why an entry is skipped.
func resolvePath(field, entry, path string) (string, *Skipped) {
	canon, err := Canonical(filepath.Clean(path))
	if err != nil {
		reason := "cannot be examined: " + err.Error()
		if os.IsNotExist(err) {
			reason = "does not exist"
		}
		return "", &Skipped{field, entry, filepath.Clean(path), reason}
	}
	return canon, nil
}

// Policy is the policy of a call whose scratch directory ({TMPDIR}) is
// tmpDir ("": $TMPDIR, then /tmp): a copy, which the caller may change.
// With tmpDir set, the rules only {TMPDIR} names are the call's own
// (PathRule.PerCall).
func (r *Resolution) Policy(tmpDir string) *Policy {
	pol := *r.base
	pol.Paths = slices.Clone(r.base.Paths)
	pol.Skipped = slices.Clone(r.base.Skipped)
	pol.Env = slices.Clone(r.base.Env)
	pol.Protect = slices.Clone(r.base.Protect)
	pol.Bind.Ports, pol.Connect.Ports = slices.Clone(r.base.Bind.Ports), slices.Clone(r.base.Connect.Ports)
	v := r.vars
	v.TmpDir = tmpDir
	for _, e := range r.tmp {
		vals, reason, _ := v.expand("TMPDIR") // never an error
		if reason != "" {
			pol.Skipped = append(pol.Skipped, Skipped{e.field, e.entry, "", reason})
			continue
		}
		path, skip := resolvePath(e.field, e.entry, vals[0]+e.rest)
		if skip != nil {
			pol.Skipped = append(pol.Skipped, *skip)
			continue
		}
		i, found := slices.BinarySearchFunc(pol.Paths, path, func(a PathRule, p string) int { return strings.Compare(a.Path, p) })
		if found {
			pol.Paths[i].Access |= e.access
			continue
		}
		pol.Paths = slices.Insert(pol.Paths, i, PathRule{Path: path, Access: e.access, PerCall: tmpDir != ""})
	}
	return &pol
}
