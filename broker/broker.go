// Package broker carries a host's requests to leave the sandbox (a tool
// declared elevated, a call with bypass) or to run as root (a tool declared
// sudo) to a person, and brings back the answer and, for sudo, the
// password.
//
// Two gates, in order, as the tools seed says: the elevation gate (approve
// once, always for this tool on this host, or deny), then, for sudo only,
// the credential gate (the password). Denying the first never reaches the
// second.
//
// This package is the approval protocol and nothing that runs it: what
// both ends of a request share, imported by the host's gate, the tool
// runner, the desktop and the Ansible module alike, so that none links
// another's machinery. It holds the request and its answer (Request,
// Decision, Answer) and how a request is shown to a person
// (Request.Prompt, also the text of a parked request's file); the wire,
// one conversation per stream connection (Ask on the asking side,
// Receive on the answering side, Converse for every hop that answers);
// and the asking side's one type, Approver (Dialed over any connection).
// Each session's toolsrv asks the host's gate (package
// [ollie/broker/gate], served by olliesrv on OLLIE_ELEVATE_SOCKET) with a
// Request it fills in from the call, naming the agent that asked
// (toolsrv.GateApprover). The gate relays the request to a desktop broker
// connected over SSH (ollie-remote up forwards a fresh socket per
// connection), parks it in the namespace (bypass/pending/{id}) for
// someone to answer by writing a file, or denies it, as the host's policy
// says. The desktop's side, which answers by its policy file or asks the
// person, is package [ollie/broker/desktop].
//
// What the Gate trusts: an asker only as the kernel describes it (this
// user, not sandboxed, running ollie's own binary), and each request id
// once; an answer only from the desktop it relayed the request to, or
// from a writer of bypass/pending, whom the namespace's permissions
// admit (the owner); a password only from that desktop, or, for a
// request approved through bypass/pending, from a writer there. A
// request's Host is never the host's word: the desktop sets it from the
// connection.
package broker

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"ollie/internal/jsonx"
	"ollie/internal/termsafe"
	"ollie/toolsrv/tool"
)

// Request is one call's ask: who wants to run what, where. It is the one
// request type from a session's toolsrv to the person: toolsrv fills it
// in, the gate relays it, the desktop shows it. ID is made by the
// asker (Ask), single use, and every answer must carry it. Host is
// never taken from the wire: the desktop sets it from the SSH connection
// the request came over.
type Request struct {
	ID      string `json:"id"`
	Host    string `json:"host,omitempty"`
	Session string `json:"session"`
	Agent   string `json:"agent,omitempty"`
	// SessionName and AgentName are what the host calls them, for people;
	// Session and Agent are their IDs.
	SessionName string          `json:"session_name,omitempty"`
	AgentName   string          `json:"agent_name,omitempty"`
	Tool        string          `json:"tool"`
	Variant     int             `json:"variant"` // -1 for a tool without variants
	Executable  string          `json:"executable"`
	Args        json.RawMessage `json:"args,omitempty"`
	Cwd         string          `json:"cwd"`
	Bypass      bool            `json:"bypass,omitempty"` // the call asked; otherwise the .meta declares elevated or sudo
	Sudo        bool            `json:"sudo,omitempty"`
	// Yolo asks to create a yolo session (Session is its name): one whose
	// tools all run outside the sandbox, without approval. Its Tool is
	// YoloTool, which policy rules name to allow or forbid it per host.
	Yolo bool `json:"yolo,omitempty"`
}

// YoloTool is the tool name of a request to create a yolo session: a
// name no tool can have (tools' names have no "-"), for policy rules.
const YoloTool = "yolo-session"

// NewID returns a fresh request id: 128 random bits.
func NewID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Same reports whether two requests ask for the same thing (ignoring their
// ids), so that identical pending requests are asked once.
func (r *Request) Same(o *Request) bool {
	return r.Host == o.Host && r.Session == o.Session && r.Tool == o.Tool && r.Variant == o.Variant &&
		r.Executable == o.Executable && r.Cwd == o.Cwd && r.Sudo == o.Sudo && r.Bypass == o.Bypass && r.Yolo == o.Yolo &&
		string(jsonx.Canonical(r.Args)) == string(jsonx.Canonical(o.Args))
}

// CompactArgs is the call's arguments as compact JSON with sorted keys,
// as the prompt shows them and a policy rule's args pattern matches
// them, so that neither depends on how the host spaced them.
func (r *Request) CompactArgs() string { return string(jsonx.Canonical(r.Args)) }

// Limits on what a host wrote, in bytes once made visible: enough to
// recognise a tool or a path, never a screenful.
const (
	maxNameField    = 80  // tool, session, agent, request id
	maxPathField    = 240 // executable, working directory
	maxArgsField    = 400 // the arguments as compact JSON
	MaxProblemField = 80  // why a password is asked again; the gate's pending list shows it too
)

// Prompt is the text a person is shown for the elevation gate. What is
// not quoted is the desktop's own: its first lines name the host the
// request came over (Host, which the desktop sets from the connection,
// never from the request), what kind of request it is, the tool (a name
// Check holds to tool.NameRule) and the request's id (Check holds it to
// an identifier). Every other field is the host's account, shown under
// "HOST says:" one per line, each quoted (termsafe.Quote: control
// characters made visible, clipped, nothing able to close its quotes),
// so that no text of the host's reads as the desktop's sentence.
func (r *Request) Prompt() string {
	var b strings.Builder
	host := r.HostName()
	if r.Yolo {
		fmt.Fprintf(&b, "ollie: %s asks to create a yolo session: all its tools run outside the sandbox, without approval\n", host)
		fmt.Fprintf(&b, "  request:  %s\n", r.IDName())
		fmt.Fprintf(&b, "  %s says:\n", host)
		if r.Session == "" {
			b.WriteString("    session:  none named: the host names it\n")
		} else {
			fmt.Fprintf(&b, "    session:  %s\n", termsafe.Quote(r.Session, maxNameField))
		}
		fmt.Fprintf(&b, "    in:       %s\n", termsafe.Quote(r.Cwd, maxPathField))
		return b.String()
	}
	what := "run outside its sandbox"
	if r.Sudo {
		what = "run as root (sudo)"
	}
	fmt.Fprintf(&b, "ollie: %s asks to %s\n", host, what)
	fmt.Fprintf(&b, "  tool:     %s", r.ToolName())
	if r.Variant >= 0 { // -1: the tool has no variants
		fmt.Fprintf(&b, " (variant %d)", r.Variant)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  request:  %s\n", r.IDName())
	fmt.Fprintf(&b, "  %s says:\n", host)
	fmt.Fprintf(&b, "    runs:     %s\n", termsafe.Quote(r.Executable, maxPathField))
	if len(r.Args) > 0 {
		fmt.Fprintf(&b, "    args:     %s\n", termsafe.Quote(r.CompactArgs(), maxArgsField))
	}
	fmt.Fprintf(&b, "    in:       %s\n", termsafe.Quote(r.Cwd, maxPathField))
	switch {
	case r.Session == "" && r.Agent == "":
		b.WriteString("    session:  none: run by hand on the host (olliesrv tools run), not by an agent\n")
	case r.Agent == "":
		fmt.Fprintf(&b, "    session:  %s, no agent: called through the session's tools\n", named(r.SessionName, r.Session))
	default:
		fmt.Fprintf(&b, "    session:  %s, agent %s\n", named(r.SessionName, r.Session), named(r.AgentName, r.Agent))
	}
	if r.Bypass {
		b.WriteString("    the agent asked for bypass\n")
	}
	return b.String()
}

// PasswordPrompt is the text for the credential gate, one line. It names
// the connection's host first and again last, beside where the password
// is typed; the one text of the host's it holds, why the password is
// asked again, is quoted and attributed, so that whatever it says, the
// person sees whose password is asked.
func (r *Request) PasswordPrompt(attempt int, problem string) string {
	host := r.HostName()
	p := fmt.Sprintf("ollie: sudo password for root on %s, to run %s", host, r.ToolName())
	if problem != "" {
		p = fmt.Sprintf("%s; %s says %s, attempt %d of %d", p, host, termsafe.Quote(problem, MaxProblemField), attempt, MaxPasswordAttempts)
	}
	return fmt.Sprintf("%s (asked by %s): ", p, host)
}

// MaxIDLen is the longest request id Check admits: NewID's are 32.
const MaxIDLen = 64

// ErrBadRequest is wrapped by Check's errors: a request whose tool or id
// is not an identifier.
var ErrBadRequest = errors.New("broker: bad request")

// Check holds the fields a prompt shows as the desktop's own words to
// identifiers: the tool's name to tool.NameRule (YoloTool for a yolo
// request, which Receive sets) and the id to letters, digits, "-", "_"
// and ".", at most MaxIDLen. A request outside them is refused, never
// shown.
func (r *Request) Check() error {
	if !validID(r.ID) {
		return fmt.Errorf("%w: the request id %s is not 1 to %d letters, digits, '-', '_' or '.'", ErrBadRequest, termsafe.Quote(r.ID, maxNameField), MaxIDLen)
	}
	if r.Yolo && r.Tool == YoloTool {
		return nil
	}
	if !validToolName(r.Tool) {
		return fmt.Errorf("%w: the tool name %s is not a tool's name (%s)", ErrBadRequest, termsafe.Quote(r.Tool, maxNameField), tool.NameRule)
	}
	if r.Variant < -1 {
		return fmt.Errorf("%w: variant %d", ErrBadRequest, r.Variant)
	}
	return nil
}

// validToolName is tool.NameRule, "-" admitted too: the names of the
// desktop's own requests (YoloTool, deploy -system's) have one, so that
// no tool's can be them. A name with "-" is an identifier all the same.
func validToolName(s string) bool { return tool.ValidName(strings.ReplaceAll(s, "-", "_")) }

func validID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// HostName is the host to show: the connection's, made safe, or
// "(unknown host)".
func (r *Request) HostName() string { return termsafe.Field(orUnknown(r.Host), maxNameField) }

// ToolName is the tool's name to show: an identifier once Check has
// passed, else quoted as the host's words; YoloTool for a yolo request,
// whatever the host said.
func (r *Request) ToolName() string {
	if r.Yolo {
		return YoloTool
	}
	if !validToolName(r.Tool) { // unchecked: the host's words
		return termsafe.Quote(r.Tool, maxNameField)
	}
	return r.Tool
}

// IDName is the request's id to show: an identifier once Check has
// passed, else quoted as the host's words.
func (r *Request) IDName() string {
	if !validID(r.ID) {
		return termsafe.Quote(r.ID, maxNameField)
	}
	return r.ID
}

// named shows a session or an agent as "NAME" ("ID"), or "ID" alone when
// the host gave no name; each the host's words, quoted.
func named(name, id string) string {
	if name == "" || name == id {
		return termsafe.Quote(id, maxNameField)
	}
	return termsafe.Quote(name, maxNameField) + " (" + termsafe.Quote(id, maxNameField) + ")"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown host)"
	}
	return s
}

// MaxPasswordAttempts is how often a sudo password is asked for one
// request: the first time and, after a wrong one, twice more.
const MaxPasswordAttempts = 3

// Decision is the elevation gate's answer.
type Decision string

const (
	Deny   Decision = "deny"
	Once   Decision = "once"   // this request only
	Always Decision = "always" // this tool on this host from now on (saved in the policy file)
)

// Valid reports whether d is one of the three decisions.
func (d Decision) Valid() bool { return d == Deny || d == Once || d == Always }

// Answer is a decision with the reason a denial gives the model.
type Answer struct {
	Decision Decision `json:"decision"`
	Reason   string   `json:"reason,omitempty"`
}

// ErrDenied is returned when a person declines or nobody can answer.
var ErrDenied = errors.New("denied")

// ErrPolicy is wrapped by every error about the content of a file a
// person writes to say what is allowed: the desktop's policy file and the
// host's list of tools approved always.
var ErrPolicy = errors.New("broker: bad policy")

// Zero overwrites a secret in memory once it has been handed on.
func Zero(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
