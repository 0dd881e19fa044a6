package toolsrv

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"ollie/ns"
	"ollie/ns/stream"
	"ollie/toolsrv/tool"
)

// Server is one session's toolsrv namespace: the loaded tools, calls, and
// background processes, as files.
type Server struct {
	Runner *Runner
	Procs  *Procs
	// Registry renders `olliesrv tools` for this host (optional).
	Registry func() string

	// The schema as last rendered, and the revision it is of: every
	// turn of every agent reads it, and it changes only with the tools.
	schemaMu  sync.Mutex
	schemaRev uint64
	schemaOut []byte
}

// CheckSecret returns an ns.Server.CheckAttach that admits only an attach
// whose name is secret: the session's parent hands the secret over at
// spawn, so only it can call tools.
func CheckSecret(secret string) func(user, aname string) error {
	return func(user, aname string) error {
		if secret == "" || subtle.ConstantTimeCompare([]byte(aname), []byte(secret)) != 1 {
			return errors.New("toolsrv: authentication failed")
		}
		return nil
	}
}

// CallRequest is what call and proc/new.bg read: a tool name and the
// model's arguments (dispatch flags included).
type CallRequest struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Caller *Caller         `json:"caller,omitempty"` // nil: the session's
}

func (cr CallRequest) caller() Caller {
	if cr.Caller == nil {
		return Caller{}
	}
	return *cr.Caller
}

var ctlCommands = []string{"help", "load NAME", "unload NAME", "reload"}

// Tree declares the namespace.
func (s *Server) Tree() (*ns.Tree, error) {
	procs := ns.Listing(func(context.Context, *ns.Call) ([]*Proc, error) { return s.Procs.List(), nil },
		func(p *Proc) ns.Entry { return ns.Entry{Name: p.ID, Key: p.ID} })
	root := ns.Dir("", 0500, "",
		ns.ReadFile("tools", 0400, "Loaded tools: name<TAB>description.", s.tools),
		ns.ReadFile("schema", 0400, "Loaded tools as model function declarations (JSON).", s.schema),
		ns.ReadFile("revision", 0400, "The tool set's revision: it changes when tools are loaded, unloaded or reloaded.", s.revision),
		ns.WaitFile("revwait", 0400, "Blocks until the revision changes, then reads the new one.", s.revwait),
		ns.ReadFile("state", 0400, "What a run of the session's tool server hands the next when the session rests: the tools loaded, the revision, the last background process id, and how many background processes it holds (JSON).", s.state),
		ns.ReadFile("registry", 0400, "Every tool on this host, the variant chosen and why.", s.registry),
		ns.RdWrFile("ctl", 0600, "Tool controls: "+strings.Join(ctlCommands, ", ")+".", s.ctl),
		ns.RdWrFile("call", 0600, `Run a call: write {"tool": NAME, "args": {...}}; read the result (JSON).`, s.call),
		ns.Dir("proc", 0500, "Background processes.",
			ns.RdWrFile("new.bg", 0600, `Start a call in the background: write {"tool": NAME, "args": {...}}; read its id.`, s.newProc),
			ns.Dynamic("pid", 0500, "One background process.", procs,
				ns.StreamFile("out", 0400, "Its output as it comes; ends when it exits.", s.procOut),
				ns.ReadFile("status", 0400, "running, or how it ended.", s.procStatus),
				ns.ReadFile("tool", 0400, "The tool it runs.", s.procTool),
				ns.RdWrFile("ctl", 0600, "term, kill or dismiss.", s.procCtl),
				ns.RdWrFile("poll", 0600, `Write an offset; read {"status", "next", "data"}: the output from that offset, without waiting.`, s.procPoll),
			),
		),
	)
	// The one principal is the agent that holds the secret.
	return ns.NewTree(root, "agent", "agent")
}

func (s *Server) tools(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, t := range s.Runner.Tools.Tools() {
		fmt.Fprintf(&b, "%s\t%s\n", t.Name, t.Description)
	}
	return []byte(b.String()), nil
}

func (s *Server) schema(ctx context.Context, c *ns.Call) ([]byte, error) {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	rev := s.Runner.Tools.Revision()
	if s.schemaOut != nil && rev == s.schemaRev {
		return s.schemaOut, nil // never written to: the server keeps what a handler returns
	}
	decls := []tool.FunctionDecl{}
	for _, t := range s.Runner.Tools.Tools() {
		decls = append(decls, tool.FunctionDecl{Name: t.Name, Description: t.Description, Parameters: t.Schema(),
			Scope: t.ScopeKind.String(), ScopeArg: t.ScopeArg, Tier: t.Tier, ReplaySafe: t.ReplaySafe})
	}
	out, err := json.MarshalIndent(decls, "", "  ")
	if err != nil {
		return nil, err
	}
	s.schemaRev, s.schemaOut = rev, out
	return out, nil
}

func (s *Server) revision(ctx context.Context, c *ns.Call) ([]byte, error) {
	return []byte(strconv.FormatUint(s.Runner.Tools.Revision(), 10) + "\n"), nil
}

func (s *Server) revwait(ctx context.Context, c *ns.Call) ([]byte, error) {
	rev, err := s.Runner.Tools.Wait(ctx, s.Runner.Tools.Revision())
	if err != nil {
		return nil, err
	}
	return []byte(strconv.FormatUint(rev, 10) + "\n"), nil
}

func (s *Server) registry(ctx context.Context, c *ns.Call) ([]byte, error) {
	if s.Registry == nil {
		return nil, errors.New("registry: not available")
	}
	return []byte(s.Registry()), nil
}

func (s *Server) ctl(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	verb, arg, _ := strings.Cut(strings.TrimSpace(string(req)), " ")
	arg = strings.TrimSpace(arg)
	tools := s.Runner.Tools
	var err error
	switch verb {
	case "help":
		return []byte(strings.Join(ctlCommands, "\n") + "\n"), nil
	case "load":
		err = tools.Load(arg)
	case "unload":
		err = tools.Unload(arg)
	case "reload":
		tools.SetRegistry(tools.Registry().Reload())
	default:
		return nil, fmt.Errorf("ctl: unknown command %q (valid: %s)", verb, strings.Join(ctlCommands, ", "))
	}
	if err != nil {
		return nil, err
	}
	return []byte(strconv.FormatUint(tools.Revision(), 10) + "\n"), nil
}

func parseCall(req []byte) (CallRequest, error) {
	var cr CallRequest
	dec := json.NewDecoder(strings.NewReader(string(req)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cr); err != nil {
		return cr, fmt.Errorf(`a call is {"tool": NAME, "args": {...}}: %v`, err)
	}
	if cr.Tool == "" {
		return cr, errors.New(`a call names its tool: {"tool": NAME, "args": {...}}`)
	}
	return cr, nil
}

// call runs the tool while the write waits: a flush or a closed connection
// kills it.
func (s *Server) call(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	cr, err := parseCall(req)
	if err != nil {
		return nil, err
	}
	res := s.Runner.RunFor(ctx, cr.caller(), cr.Tool, cr.Args)
	return json.Marshal(res)
}

func (s *Server) newProc(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	cr, err := parseCall(req)
	if err != nil {
		return nil, err
	}
	p, err := s.Procs.StartFor(ctx, cr.caller(), cr.Tool, cr.Args)
	if err != nil {
		return nil, err
	}
	return []byte(p.ID + "\n"), nil
}

func (s *Server) proc(c *ns.Call) (*Proc, error) {
	return s.Procs.Get(c.Key("pid"))
}

func (s *Server) procOut(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
	p, err := s.proc(c)
	if err != nil {
		return nil, err
	}
	// Reading keeps an exited process around for another Linger.
	c.OnClunk(func() { p.Seen(s.Procs.now()) })
	return p.Out, nil
}

func (s *Server) procStatus(ctx context.Context, c *ns.Call) ([]byte, error) {
	p, err := s.proc(c)
	if err != nil {
		return nil, err
	}
	return []byte(p.Status() + "\n"), nil
}

func (s *Server) procTool(ctx context.Context, c *ns.Call) ([]byte, error) {
	p, err := s.proc(c)
	if err != nil {
		return nil, err
	}
	return []byte(p.Tool + "\n"), nil
}

func (s *Server) procCtl(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	id := c.Key("pid")
	var err error
	switch verb := strings.TrimSpace(string(req)); verb {
	case "term":
		err = s.Procs.Signal(id, syscall.SIGTERM)
	case "kill":
		err = s.Procs.Signal(id, syscall.SIGKILL)
	case "dismiss":
		err = s.Procs.Dismiss(id)
	default:
		return nil, fmt.Errorf("proc/%s/ctl: unknown command %q (valid: term, kill, dismiss)", id, verb)
	}
	if err != nil {
		return nil, err
	}
	return []byte("ok\n"), nil
}

func (s *Server) procPoll(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	p, err := s.proc(c)
	if err != nil {
		return nil, err
	}
	off, err := strconv.ParseInt(strings.TrimSpace(string(req)), 10, 64)
	if err != nil || off < 0 {
		return nil, fmt.Errorf("proc/%s/poll: write a byte offset, not %q", p.ID, req)
	}
	status := p.Status() // before reading, so an exit is never reported ahead of its output
	data, next, closed := p.Out.Since(off)
	p.Seen(s.Procs.now())
	return json.Marshal(tool.ProcPoll{Status: status, Next: next, Data: string(data), Ended: closed && status != "running"})
}
