package toolsrv

import (
	"reflect"
	"slices"

	"ollie/toolsrv/sandbox"
)

// A call's profile is resolved for its directory once, and again after
// each call that used the resolution, off the call's path: resolving
// (every path of the profile and the protected set with its links
// followed) cost half a millisecond of CPU per call, more than the rest of
// the Runner. What a call gets is what the last resolution found: a path
// created, removed or linked elsewhere since is seen by the call after
// next, never by following a link at the call: the confining stage opens
// each path without following one (a path that has become a link refuses
// the call), and the session's directory is checked at every call. An
// edited profile is seen at once: the file is read at every call, and a
// profile that differs from the one resolved is resolved again then.

// maxResolutions bounds the resolutions a Runner keeps: one per profile
// and directory its agents call tools in.
const maxResolutions = 64

type resolutionKey struct{ profile, cwd string }

// A resolution is a profile resolved for a directory, with the protected
// paths of its calls.
type resolution struct {
	prof       *sandbox.Profile // as it was loaded
	vars       sandbox.Vars     // without TmpDir
	res        *sandbox.Resolution
	protect    []string
	refreshing bool
}

// resolve returns the policy of a call under prof in cwd with its scratch
// directory, and a func to call once the call is over, which resolves
// prof again in the background for the next call.
func (r *Runner) resolve(prof *sandbox.Profile, cwd, scratch string) (*sandbox.Policy, func(), error) {
	key := resolutionKey{prof.Name, cwd}
	r.resMu.Lock()
	e := r.resolved[key]
	r.resMu.Unlock()
	if e == nil || !reflect.DeepEqual(e.prof, prof) {
		vars := sandbox.Vars{CWD: cwd, ToolsPath: r.ToolsPath}
		var err error
		if e, err = newResolution(prof, vars); err != nil {
			return nil, nil, err
		}
		r.resMu.Lock()
		if r.resolved == nil || len(r.resolved) >= maxResolutions {
			r.resolved = map[resolutionKey]*resolution{}
		}
		r.resolved[key] = e
		r.resMu.Unlock()
	}
	pol := e.res.Policy(scratch)
	pol.Protect = slices.Clone(e.protect)
	return pol, func() { r.refresh(key, e) }, nil
}

func newResolution(prof *sandbox.Profile, vars sandbox.Vars) (*resolution, error) {
	res, err := prof.ResolveCalls(vars)
	if err != nil {
		return nil, err
	}
	return &resolution{prof: prof, vars: vars, res: res, protect: sandbox.ProtectedPaths(vars)}, nil
}

// refresh resolves e's profile again in the background, unless that is
// under way or e was replaced, and keeps the result for the next call; a
// profile that no longer resolves is dropped, and the next call says why.
func (r *Runner) refresh(key resolutionKey, e *resolution) {
	r.resMu.Lock()
	if e.refreshing || r.resolved[key] != e {
		r.resMu.Unlock()
		return
	}
	e.refreshing = true
	r.resMu.Unlock()
	r.refreshes.Add(1)
	go func() {
		defer r.refreshes.Done()
		fresh, err := newResolution(e.prof, e.vars)
		r.resMu.Lock()
		defer r.resMu.Unlock()
		e.refreshing = false
		switch {
		case r.resolved[key] != e:
		case err != nil:
			delete(r.resolved, key)
		default:
			r.resolved[key] = fresh
		}
	}()
}
