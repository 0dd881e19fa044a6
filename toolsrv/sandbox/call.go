package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// What the pool sends a pre-started helper's confining stage, each a
// frame (sendFramed) whose first byte says what it is.
const (
	// prepareTag: the policy the pool expects the stage's call to have,
	// without its per-call rules, for the stage to prepare while it
	// waits (prepare_linux.go). At most one, before the call.
	prepareTag = 'P'
	// callTag: the call, a callMsg, with its stdin, stdout and stderr.
	callTag = 'C'
)

// callMsg is a call as a pre-started helper receives it, beside its
// stdin, stdout and stderr. Its policy is Policy, or, with Prepared, the
// one the stage was sent to prepare, which it equals byte for byte; Extra
// are the policy's per-call rules either way.
type callMsg struct {
	Path     string          `json:"path"`
	Argv     []string        `json:"argv"`
	Env      []string        `json:"env"`
	Dir      string          `json:"dir,omitempty"`
	Policy   json.RawMessage `json:"policy,omitempty"`
	Prepared bool            `json:"prepared,omitempty"`
	Extra    []PathRule      `json:"extra,omitempty"`
}

// decodeCall decodes a call; prep is what the stage prepared, nil if
// nothing. It returns the call's whole policy.
func decodeCall(data []byte, prep *prepared) (*callMsg, *Policy, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m callMsg
	if err := dec.Decode(&m); err != nil {
		return nil, nil, fmt.Errorf("sandbox: reading the call: %w", err)
	}
	if !filepath.IsAbs(m.Path) || len(m.Argv) == 0 {
		return nil, nil, fmt.Errorf("sandbox: the call names no absolute tool path (%q) or no argv", m.Path)
	}
	var base *Policy
	if m.Prepared {
		if prep == nil || prep.policy == nil {
			return nil, nil, fmt.Errorf("sandbox: the call names a prepared policy this helper was not sent")
		}
		base = prep.policy
	} else {
		var err error
		if base, err = decodePolicy(m.Policy); err != nil {
			return nil, nil, fmt.Errorf("sandbox: reading the call's policy: %w", err)
		}
	}
	return &m, base.withRules(m.Extra), nil
}

// splitPolicy returns p without its per-call rules, as JSON, and those
// rules.
func splitPolicy(p *Policy) ([]byte, []PathRule, error) {
	base := *p
	base.Paths = nil
	var extra []PathRule
	for _, r := range p.Paths {
		if r.PerCall {
			extra = append(extra, r)
		} else {
			base.Paths = append(base.Paths, r)
		}
	}
	data, err := json.Marshal(&base)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	return data, extra, nil
}

// withRules is a copy of p with rules added, its paths still sorted; a
// path p has already gets the rights of both.
func (p *Policy) withRules(rules []PathRule) *Policy {
	q := *p
	q.Paths = slices.Clone(p.Paths)
	for _, r := range rules {
		i, found := slices.BinarySearchFunc(q.Paths, r.Path, func(a PathRule, path string) int { return strings.Compare(a.Path, path) })
		if found {
			q.Paths[i].Access |= r.Access
			continue
		}
		q.Paths = slices.Insert(q.Paths, i, r)
	}
	return &q
}

// sendFramed writes data, preceded by its length, on the stream socket fd,
// with fds attached to the length.
func sendFramed(fd int, data []byte, fds []int) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(data)))
	for {
		err := unix.Sendmsg(fd, hdr[:], unix.UnixRights(fds...), nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
