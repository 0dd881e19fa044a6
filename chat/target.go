package chat

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"ollie/internal/termsafe"
	"ollie/ns/client"
	"ollie/ns/words"
)

// chatAgent is the name of the agent a chat creates in the directory's
// session when it has none.
const chatAgent = "chat"

// target is the agent a chat talks to.
type target struct {
	session, agent string // names, for people
	dir            string // session/SID/agent/AID: by ID, so renames do not lose it
	id             string // the agent's ID
}

// A problem is bad input or a state the person can fix: one line saying
// what to do, never a stack of 9P errors.
type problem struct{ msg string }

func (p *problem) Error() string { return p.msg }

func problemf(format string, args ...any) error { return &problem{fmt.Sprintf(format, args...)} }

var notName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// sessionName is the session a chat started in dir belongs to: the
// directory's name, made a valid session name.
func sessionName(dir string) string {
	name := strings.Trim(notName.ReplaceAllString(filepath.Base(dir), "-"), "-.")
	if len(name) > 64 {
		name = name[:64]
	}
	if name == "" || name == "new" || name == "idx" {
		name = "chat-" + name
	}
	return strings.TrimRight(name, "-")
}

// resolve finds the agent the options name, creating the directory's
// session and its agent when no path is given.
func resolve(ctx context.Context, c *client.Conn, opt Options) (*target, error) {
	if err := checkModels(ctx, c, opt.Model); err != nil {
		return nil, err
	}
	if opt.Path != "" {
		return lookup(ctx, c, opt.Path)
	}
	name := sessionName(opt.Cwd)
	if _, err := c.Stat(ctx, "session/"+name); err != nil {
		if !client.IsServerError(err) {
			return nil, err
		}
		req := "name=" + name
		if opt.Where == "" {
			req += " cwd=" + words.Quote(opt.Cwd)
		} // else this directory is the desktop's: the session works in the host's home
		if _, err := c.RdWr(ctx, "session/new", []byte(req)); err != nil {
			// Another chat started in this directory may have made it
			// a moment ago.
			if _, serr := c.Stat(ctx, "session/"+name); serr != nil {
				return nil, problemf("cannot start a session for %s: %s", opt.Cwd, serverWords(err))
			}
		}
	}
	sdir := "session/" + name + "/agent/"
	if _, err := c.Stat(ctx, sdir+chatAgent); err != nil {
		if !client.IsServerError(err) {
			return nil, err
		}
		req := "name=" + chatAgent
		if opt.Profile != "" {
			req += " profile=" + opt.Profile
		}
		if opt.Model != "" {
			req += " model=" + opt.Model
		}
		if _, err := c.RdWr(ctx, sdir+"new", []byte(req)); err != nil {
			if _, serr := c.Stat(ctx, sdir+chatAgent); serr != nil {
				return nil, problemf("cannot start an agent in session %s: %s", name, serverWords(err))
			}
			t, err := lookup(ctx, c, sdir+chatAgent) // made by another chat a moment ago
			if err != nil {
				return nil, err
			}
			return t, t.choose(ctx, c, opt)
		}
		return lookup(ctx, c, sdir+chatAgent)
	}
	t, err := lookup(ctx, c, sdir+chatAgent)
	if err != nil {
		return nil, err
	}
	return t, t.choose(ctx, c, opt)
}

// lookup finds the agent at p (session/S/agent/A, or S/A).
func lookup(ctx context.Context, c *client.Conn, p string) (*target, error) {
	p = strings.Trim(path.Clean("/"+p), "/")
	parts := strings.Split(p, "/")
	if len(parts) == 2 {
		parts = []string{"session", parts[0], "agent", parts[1]}
	}
	if len(parts) != 4 || parts[0] != "session" || parts[2] != "agent" {
		return nil, problemf("%q is not an agent's path: give session/SESSION/agent/AGENT (or SESSION/AGENT)", p)
	}
	dir := strings.Join(parts, "/")
	id, err := c.ReadAll(ctx, dir+"/id")
	if err != nil {
		if client.IsServerError(err) {
			return nil, problemf("no agent at %s: 'ollie ls session/%s/agent' lists the agents there", termsafe.Line(dir), termsafe.Line(parts[1]))
		}
		return nil, err
	}
	sid, err := c.ReadAll(ctx, "session/"+parts[1]+"/id")
	if err != nil {
		return nil, err
	}
	sname, _ := c.ReadAll(ctx, "session/"+parts[1]+"/name")
	aname, _ := c.ReadAll(ctx, dir+"/name")
	t := &target{session: strings.TrimSpace(string(sname)), agent: strings.TrimSpace(string(aname)), id: strings.TrimSpace(string(id))}
	t.dir = "session/" + strings.TrimSpace(string(sid)) + "/agent/" + t.id
	return t, nil
}

// choose gives an existing agent the profile and model asked for.
func (t *target) choose(ctx context.Context, c *client.Conn, opt Options) error {
	if opt.Profile != "" {
		if _, err := c.RdWr(ctx, t.dir+"/ctl", []byte("agent "+opt.Profile)); err != nil {
			return problemf("profile %s: %s", opt.Profile, serverWords(err))
		}
	}
	if opt.Model != "" {
		if _, err := c.RdWr(ctx, t.dir+"/ctl", []byte("model "+opt.Model)); err != nil {
			return problemf("model %s: %s", opt.Model, serverWords(err))
		}
	}
	return nil
}

// checkModels refuses a host where no model answers (a backend
// unavailable, or the ollama no one configured with no Ollama there), and
// a model the host's backends do not list, before anything is made there. A backend
// that lists no models (some servers do not) is taken at its word.
func checkModels(ctx context.Context, c *client.Conn, model string) error {
	b, err := c.ReadAll(ctx, "models")
	if err != nil {
		return err
	}
	var listed []string
	var down string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, m, ok := strings.Cut(l, "\t")
		m, _, _ = strings.Cut(m, "\t") // backend, model, window
		switch {
		case !ok:
		case strings.HasPrefix(m, "(unavailable"), strings.HasPrefix(m, "(not configured"):
			if down == "" {
				down = name + " " + strings.TrimSuffix(strings.TrimPrefix(m, "("), ")")
			}
		default:
			listed = append(listed, m)
		}
	}
	if len(listed) == 0 && down != "" {
		return problemf("no model answers on this host (%s): set OLLAMA_HOST, or OPENAI_API_KEY and OPENAI_BASE_URL, in olliesrv's environment, or write ~/.config/ollie/backends.json, then restart olliesrv", termsafe.Field(down, 300))
	}
	if model != "" && len(listed) > 0 && !slices.Contains(listed, model) {
		shown := listed[:min(len(listed), 6)]
		more := ""
		if len(listed) > len(shown) {
			more = ", …"
		}
		return problemf("model %s is not among this host's models (%s%s): 'ollie read models' lists them", termsafe.Line(model), termsafe.Line(strings.Join(shown, ", ")), more)
	}
	return nil
}

// serverWords is what the server said, without the path and operation
// the client wraps around it.
func serverWords(err error) string {
	msg := err.Error()
	var pe interface{ Unwrap() error }
	for errors.As(err, &pe) {
		inner := pe.Unwrap()
		if inner == nil {
			break
		}
		err, msg = inner, inner.Error()
	}
	return termsafe.Line(msg)
}
