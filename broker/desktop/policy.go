package desktop

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"gopkg.in/yaml.v3"

	"ollie/broker"
	"ollie/internal/paths"
)

// Policy is the desktop broker's rules file: answers to the elevation
// gate given before anyone is asked. It is YAML, so that a person can
// write it by hand and comment it:
//
//	rules:
//	  - host: web1
//	    tool: system_logs
//	    decision: allow
//	  - host: "*"
//	    tool: "*"
//	    sudo: true
//	    decision: deny
//
// Rules are tried in order and the first that applies decides. A rule
// answers the elevation gate only: an allowed sudo request still needs
// its password.
//
// A sudo request is never allowed by a wildcard: an allow rule applies to
// one only when its host has no glob metacharacters and its tool is a
// name, not "*". A deny rule may be as wide as it likes.
//
// The file is live: Refresh, which costs one stat when nothing changed,
// reads it again after an edit, and a version that does not parse keeps
// the last good rules in force (Err says why) rather than asking about
// everything or nothing.
type Policy struct {
	// Path is the file the policy was read from and AddAlways writes.
	Path string

	mu     sync.RWMutex
	rules  []Rule
	limits Limits     // the file's budget: section; zero fields are the defaults
	doc    *yaml.Node // the file as read, so that saving keeps its comments
	blank  []byte     // the file, when it held only comments (yaml.v3 drops those)
	seen   fileStamp  // the file as last looked at, for Refresh
	err    error      // why the file as it is now is not in force; nil when it is
}

// fileStamp tells one version of a file from another without reading it:
// an editor that writes in place changes the size or the times, one that
// renames a new file over the old changes the inode.
type fileStamp struct {
	exists           bool
	size             int64
	mtime, ctime     int64 // nanoseconds
	dev, ino, nlinks uint64
}

func stampOf(name string) fileStamp {
	fi, err := os.Stat(name)
	if err != nil {
		return fileStamp{} // missing, or unreadable: reading it says which
	}
	st := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ctime = sys.Ctim.Nano()
		st.dev, st.ino, st.nlinks = uint64(sys.Dev), sys.Ino, uint64(sys.Nlink)
	}
	return st
}

// Rule is one line of policy.
type Rule struct {
	// Host is a path.Match glob for the host's name; "" means "*".
	Host string `yaml:"host"`
	// Tool is a tool's name, [broker.YoloTool] for creating a yolo
	// session, or "*" for any; "" means "*".
	Tool string `yaml:"tool"`
	// Args, when set, is a regular expression that must match the whole
	// of the call's arguments as compact JSON (keys sorted), e.g.
	// `\{"lines":"[0-9]+"\}`.
	Args string `yaml:"args,omitempty"`
	// Sudo, when set, limits the rule to sudo requests (true) or to
	// requests that are not (false).
	Sudo *bool `yaml:"sudo,omitempty"`
	// Decision is "allow" or "deny".
	Decision string `yaml:"decision"`

	// Line is where the rule starts in its file, for messages.
	Line int `yaml:"-"`

	args *regexp.Regexp
}

// The two decisions a rule can give.
const (
	RuleAllow = "allow"
	RuleDeny  = "deny"
)

// DefaultPolicyPath is ~/.config/ollie/broker-policy.yaml, or its
// equivalent under XDG_CONFIG_HOME.
func DefaultPolicyPath() (string, error) {
	file, ok := paths.UserDir("broker-policy.yaml")
	if !ok {
		return "", errors.New("broker: where is the policy file? neither XDG_CONFIG_HOME nor HOME is an absolute path")
	}
	return file, nil
}

// LoadPolicy reads the policy file at path. A file that does not exist is
// an empty policy (everything is asked); one that cannot be parsed is an
// error naming the file, the line and the rule.
func LoadPolicy(path string) (*Policy, error) {
	p, err := OpenPolicy(path)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// OpenPolicy is LoadPolicy for a policy that stays live (see Refresh): it
// always returns one. When the file cannot be used, the error says why
// and the policy has no rules, so that everything is asked, until a good
// version is read.
func OpenPolicy(path string) (*Policy, error) {
	p := &Policy{Path: path}
	_, err := p.Refresh()
	return p, err
}

// Refresh reads the file again if it changed since it was last looked at
// (its size, times or inode differ), so that an edit applies to the next
// request; when it did not, it costs one stat. A version that cannot be
// read or parsed leaves the rules as they were: Refresh returns its
// error, and so does Err, until a good version is read. changed reports
// that the file is another version than the one last looked at, good or
// bad, so that a caller can say so once per edit. A removed file is an
// empty policy.
func (p *Policy) Refresh() (changed bool, err error) {
	if p == nil || p.Path == "" {
		return false, nil
	}
	st := stampOf(p.Path)
	p.mu.Lock()
	defer p.mu.Unlock()
	if st == p.seen {
		return false, p.err
	}
	// The stamp is taken before the read: a version written in between
	// is read now and, its stamp being newer, again next time.
	p.seen = st
	p.err = p.reload()
	return true, p.err
}

// Err is why the file as it was last looked at is not in force (the
// rules are those of the last good version), or nil.
func (p *Policy) Err() error {
	if p == nil {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.err
}

// ParsePolicy parses a policy from data; name is used in errors.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	rules, limits, doc, err := parsePolicy(name, data)
	if err != nil {
		return nil, err
	}
	return &Policy{Path: name, rules: rules, limits: limits, doc: doc}, nil
}

// Limits is the budget the file gives each host (its "budget:"
// section); a field it does not set is zero, the default.
func (p *Policy) Limits() Limits {
	if p == nil {
		return Limits{}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.limits
}

func (p *Policy) reload() error {
	data, err := os.ReadFile(p.Path)
	if errors.Is(err, os.ErrNotExist) {
		p.rules, p.limits, p.doc, p.blank = nil, Limits{}, nil, nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: reading policy: %w", err)
	}
	rules, limits, doc, err := parsePolicy(p.Path, data)
	if err != nil {
		return err
	}
	p.rules, p.limits, p.doc, p.blank = rules, limits, doc, nil
	if doc == nil {
		p.blank = data
	}
	return nil
}

// Rules returns a copy of the rules in order.
func (p *Policy) Rules() []Rule {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]Rule(nil), p.rules...)
}

// Match returns the decision of the first rule that applies to req:
// [broker.Once] for an allow rule (the rule itself is what lasts),
// [broker.Deny] for a deny rule. ok is false when no rule applies and a
// person must be asked.
func (p *Policy) Match(req *broker.Request) (d broker.Decision, r *Rule, ok bool) {
	if p == nil {
		return "", nil, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var args string
	argsDone := false
	for i := range p.rules {
		r := &p.rules[i]
		if r.Decision == RuleAllow && (req.Sudo || req.Yolo) && !r.literal() {
			continue
		}
		if r.Sudo != nil && *r.Sudo != req.Sudo {
			continue
		}
		if r.Tool != "*" && r.Tool != req.Tool {
			continue
		}
		if m, _ := path.Match(r.Host, req.Host); !m {
			continue
		}
		if r.args != nil {
			if !argsDone {
				args, argsDone = req.CompactArgs(), true
			}
			if !r.args.MatchString(args) {
				continue
			}
		}
		c := *r
		if r.Decision == RuleAllow {
			return broker.Once, &c, true
		}
		return broker.Deny, &c, true
	}
	return "", nil, false
}

// literal reports whether the rule names one host and one tool, the only
// kind that may allow a sudo request or a yolo session.
func (r *Rule) literal() bool { return r.Tool != "*" && !hasGlobMeta(r.Host) }

// hasGlobMeta reports whether a path.Match pattern matches anything other
// than one name; a backslash-escaped metacharacter is literal.
func hasGlobMeta(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

// escapeGlob makes a host name into a pattern that matches only it.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// AddAlways saves an "always" answer: a rule allowing req's tool on req's
// host, by name, appended to the file. The file is read again first, so
// that edits made while the broker ran are kept (and one that no longer
// parses is not overwritten), then replaced atomically with mode 0600; its
// directory is created with mode 0700.
func (p *Policy) AddAlways(req *broker.Request) error {
	if req.Host == "" || req.Tool == "" || req.Tool == "*" {
		return fmt.Errorf("broker: cannot save \"always\" for tool %q on host %q: both must be named", req.Tool, req.Host)
	}
	if p.Path == "" {
		return errors.New("broker: cannot save \"always\": the policy has no file")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = stampOf(p.Path)
	if p.err = p.reload(); p.err != nil {
		return p.err
	}
	r := Rule{Host: escapeGlob(req.Host), Tool: req.Tool, Decision: RuleAllow}
	for _, o := range p.rules {
		if o.Host == r.Host && o.Tool == r.Tool && o.Args == "" && o.Sudo == nil && o.Decision == RuleAllow {
			return nil
		}
	}
	doc := p.doc
	if doc == nil {
		doc = newPolicyDoc()
	}
	var item yaml.Node
	if err := item.Encode(&r); err != nil {
		return fmt.Errorf("broker: encoding a rule: %w", err)
	}
	item.HeadComment = fmt.Sprintf("always, answered for request %s", req.ID)
	seq := rulesNode(doc)
	seq.Content = append(seq.Content, &item)
	seq.Style = 0 // a block list, even if the file said "rules: []"

	var buf bytes.Buffer
	if p.doc == nil && len(bytes.TrimSpace(p.blank)) > 0 {
		buf.Write(p.blank)
		if !bytes.HasSuffix(p.blank, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("broker: encoding %s: %w", p.Path, err)
	}
	enc.Close()
	if err := writeFileAtomic(p.Path, buf.Bytes()); err != nil {
		return err
	}
	p.seen = stampOf(p.Path)
	p.err = p.reload()
	return p.err
}

func newPolicyDoc() *yaml.Node {
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{
		Kind:        yaml.MappingNode,
		HeadComment: "ollie broker policy: the first rule that applies answers the elevation gate.\nSee broker/README.md. A sudo request is never allowed by a wildcard.",
		Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: "rules"},
			{Kind: yaml.SequenceNode},
		},
	}}}
}

// rulesNode returns the sequence under "rules:", adding it if the file
// had none (an empty or comment-only file).
func rulesNode(doc *yaml.Node) *yaml.Node {
	if len(doc.Content) == 0 {
		*doc = *newPolicyDoc()
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode || (m.Tag == "!!null") {
		*m = *newPolicyDoc().Content[0]
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "rules" {
			v := m.Content[i+1]
			if v.Kind != yaml.SequenceNode {
				*v = yaml.Node{Kind: yaml.SequenceNode}
			}
			return v
		}
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "rules"}, seq)
	return seq
}

func writeFileAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return fmt.Errorf("broker: policy directory: %w", err)
	}
	if err := paths.WriteFileAtomic(name, data, 0o600); err != nil {
		return fmt.Errorf("broker: saving policy %s: %w", name, err)
	}
	return nil
}

// ruleFields are the keys a rule may have, in the order messages list
// them.
var ruleFields = []string{"host", "tool", "args", "sudo", "decision"}

// budgetFields are the keys of the budget: section.
var budgetFields = []string{"prompts_per_minute", "at_once"}

// parseBudget reads the budget: section: each field a positive number.
func parseBudget(v *yaml.Node, bad func(line int, format string, a ...any) error) (Limits, error) {
	var l Limits
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return l, nil
	}
	if v.Kind != yaml.MappingNode {
		return l, bad(v.Line, "\"budget\" must be a mapping of %s", strings.Join(budgetFields, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, n := v.Content[i], v.Content[i+1]
		var field *int
		switch k.Value {
		case "prompts_per_minute":
			field = &l.PerMinute
		case "at_once":
			field = &l.AtOnce
		default:
			return l, bad(k.Line, "budget: unknown field %q (want %s)", k.Value, strings.Join(budgetFields, ", "))
		}
		if seen[k.Value] {
			return l, bad(k.Line, "budget: %q given twice", k.Value)
		}
		seen[k.Value] = true
		if err := n.Decode(field); err != nil || *field <= 0 {
			return l, bad(n.Line, "budget: %s must be a whole number above 0, not %q", k.Value, n.Value)
		}
	}
	return l, nil
}

// parsePolicy parses the file: its rules, its budget and the document,
// which AddAlways writes back with its comments.
func parsePolicy(name string, data []byte) ([]Rule, Limits, *yaml.Node, error) {
	var limits Limits
	rules, doc, err := parseRules(name, data, &limits)
	if err != nil {
		return nil, Limits{}, nil, err
	}
	return rules, limits, doc, nil
}

// parseRules is parsePolicy, setting *limits from the budget: section.
func parseRules(name string, data []byte, limits *Limits) ([]Rule, *yaml.Node, error) {
	bad := func(line int, format string, a ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", broker.ErrPolicy, name, line, fmt.Sprintf(format, a...))
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil // an empty file asks about everything
		}
		return nil, nil, fmt.Errorf("%w: %s: %v", broker.ErrPolicy, name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, bad(extra.Line, "a second YAML document; the policy is one")
	}
	if len(doc.Content) == 0 {
		return nil, &doc, nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil, &doc, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, nil, bad(top.Line, "want a mapping with a \"rules\" list")
	}
	var seq *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value == "budget" {
			l, err := parseBudget(v, bad)
			if err != nil {
				return nil, nil, err
			}
			*limits = l
			continue
		}
		if k.Value != "rules" {
			return nil, nil, bad(k.Line, "unknown field %q (the policy has \"rules\" and \"budget\")", k.Value)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.SequenceNode {
			return nil, nil, bad(v.Line, "\"rules\" must be a list")
		}
		seq = v
	}
	if seq == nil {
		return nil, &doc, nil
	}
	rules := make([]Rule, 0, len(seq.Content))
	for i, n := range seq.Content {
		num := i + 1
		if n.Kind != yaml.MappingNode {
			return nil, nil, bad(n.Line, "rule %d: want a mapping of %s", num, strings.Join(ruleFields, ", "))
		}
		seen := map[string]bool{}
		for j := 0; j+1 < len(n.Content); j += 2 {
			k := n.Content[j]
			known := false
			for _, f := range ruleFields {
				known = known || k.Value == f
			}
			if !known {
				return nil, nil, bad(k.Line, "rule %d: unknown field %q (want %s)", num, k.Value, strings.Join(ruleFields, ", "))
			}
			if seen[k.Value] {
				return nil, nil, bad(k.Line, "rule %d: %q given twice", num, k.Value)
			}
			seen[k.Value] = true
		}
		var r Rule
		if err := n.Decode(&r); err != nil {
			return nil, nil, bad(n.Line, "rule %d: %v", num, yamlErrText(err))
		}
		r.Line = n.Line
		if err := r.compile(); err != nil {
			return nil, nil, bad(n.Line, "rule %d: %v", num, err)
		}
		rules = append(rules, r)
	}
	return rules, &doc, nil
}

func (r *Rule) compile() error {
	if r.Host == "" {
		r.Host = "*"
	}
	if r.Tool == "" {
		r.Tool = "*"
	}
	if _, err := path.Match(r.Host, ""); err != nil {
		return fmt.Errorf("host %q is not a valid glob", r.Host)
	}
	switch r.Decision {
	case RuleAllow, RuleDeny:
	case "":
		return fmt.Errorf("no decision (want allow or deny)")
	default:
		return fmt.Errorf("decision %q (want allow or deny)", r.Decision)
	}
	if r.Args != "" {
		re, err := regexp.Compile(`^(?:` + r.Args + `)$`)
		if err != nil {
			return fmt.Errorf("args %q is not a valid regular expression: %v", r.Args, err)
		}
		r.args = re
	}
	if r.Decision == RuleAllow && r.Sudo != nil && *r.Sudo && !r.literal() {
		return fmt.Errorf("an allow rule for sudo must name one host and one tool, without wildcards (host %q, tool %q)", r.Host, r.Tool)
	}
	return nil
}

func yamlErrText(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return err.Error()
}
