package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"ollie/internal/jsonx"

	"ollie/toolsrv/tool"
)

// DefaultTimeout is a tool's timeout when its .meta sets none.
const DefaultTimeout = 120 * time.Second

// maxMetaSize bounds a .meta file; a declaration is a few KiB at most.
const maxMetaSize = 1 << 20

// MaxTimeout bounds "timeout" (about 68 years) so that it fits a time.Duration.
const MaxTimeout = 1 << 31

// Fields are what a .meta declares, at the top level or in one variant. A nil
// field is unset: in a variant it inherits the top level, and at the top level
// its default applies (see Tool for the defaults).
type Fields struct {
	Description *string
	Prompt      *string
	Args        json.RawMessage // a JSON Schema for the tool's arguments; nil when unset
	Tier        *tool.Tier
	ReadOnly    *bool
	Scope       *tool.ScopeKind
	ScopeArg    *string
	Cmd         *string
	Sudo        *bool
	Elevated    *bool
	Timeout     *time.Duration
	ReplaySafe  *bool

	args *jsonschema.Schema // Args, compiled
	doc  map[string]any     // Args, decoded
}

// ArgsSchema is Args compiled, to check a call against (ArgProblems); nil
// when Args is unset.
func (f *Fields) ArgsSchema() *jsonschema.Schema { return f.args }

// ArgsDoc is Args decoded, to build on (toolsrv adds the dispatch flags);
// nil when Args is unset.
func (f *Fields) ArgsDoc() map[string]any { return f.doc }

// Variant is one conditional definition: it applies when every condition of
// Match holds on the host. An empty Match always holds.
type Variant struct {
	Match []Condition // in the order written
	Fields
}

// Meta is a parsed .meta file: the top-level fields and the variants, as
// written. Resolving it against a Host gives a Tool.
type Meta struct {
	Name     string // from the file name: shell.meta declares "shell"
	File     string // the .meta file
	Fields          // top level
	Variants []Variant
}

// Error is a problem with one .meta file. Its text names the file, the
// field as a JSON path (variants[1].match) and what was expected:
//
//	tools/system_logs.meta: variants[1].match: unknown key "bin" (expected binary, file, os, arch, env, nenv)
type Error struct {
	File  string // the .meta file
	Field string // JSON path of the offending value; "" for the file as a whole
	Msg   string // what was wrong and what was expected
	Err   error  // the underlying cause, if any
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Field + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// fieldOrder lists the fields of a .meta in the order the errors name them.
var fieldOrder = []string{
	"description", "prompt", "args", "tier", "readOnly", "scope", "scopeArg",
	"cmd", "sudo", "elevated", "timeout", "replaySafe", "variants",
}

// Parse parses the .meta file named file, whose content is data. The
// tool's name is the file's base name without ".meta". Parsing is strict: an
// unknown field, a wrong type, a duplicate key, an invalid JSON Schema in
// "args", a variant without "match", an unknown match key, an empty
// description each give a *Error; all the problems found are returned,
// joined with errors.Join, and then the *Meta is nil.
func Parse(file string, data []byte) (*Meta, error) {
	m, errs := parse(file, data)
	if len(errs) > 0 {
		all := make([]error, len(errs))
		for i, e := range errs {
			all[i] = e
		}
		return nil, errors.Join(all...)
	}
	return m, nil
}

type parser struct {
	file string
	errs []*Error
}

func (p *parser) errorf(field, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func parse(file string, data []byte) (*Meta, []*Error) {
	p := &parser{file: file}
	name := strings.TrimSuffix(filepath.Base(file), ".meta")
	if !tool.ValidName(name) {
		p.errorf("", "tool name %q (the file name without .meta) must match %s", name, tool.NameRule)
	}
	if len(data) > maxMetaSize {
		p.errorf("", "file is %d bytes (a .meta may be at most %d)", len(data), maxMetaSize)
		return nil, p.errs
	}
	if err := syntaxCheck(data); err != nil {
		p.errs = append(p.errs, &Error{File: file, Msg: err.Error(), Err: err})
		return nil, p.errs
	}
	top, ok := p.object("", data)
	if !ok {
		return nil, p.errs
	}
	m := &Meta{Name: name, File: file}
	sawVariants := false
	for _, mb := range top {
		switch {
		case mb.Key == "variants":
			sawVariants = true
			m.Variants = p.variants(mb.Value)
		case p.field("", mb, &m.Fields):
		default:
			p.errorf("", "unknown field %q (expected %s)%s", mb.Key, strings.Join(fieldOrder, ", "), didYouMean(mb.Key, fieldOrder))
		}
	}
	p.checkResolved(m, sawVariants)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return m, nil
}

// ReadFile reads and parses the .meta file named file. Each problem, the
// file's own (missing, not a regular file, too big) or its content's (see
// Parse), is one *Error; then the *Meta is nil.
func ReadFile(file string) (*Meta, []*Error) {
	fi, err := os.Stat(file)
	switch {
	case err != nil:
	case fi.IsDir():
		err = errors.New("is a directory")
	case !fi.Mode().IsRegular():
		err = errors.New("not a regular file")
	}
	if err == nil && fi.Size() > maxMetaSize {
		err = fmt.Errorf("%d bytes (a .meta may be at most %d)", fi.Size(), maxMetaSize)
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		var pe *fs.PathError
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		return nil, []*Error{{File: file, Msg: "cannot read: " + msg, Err: err}}
	}
	return parse(file, data)
}

// syntaxCheck reports invalid JSON with its line and column.
func syntaxCheck(data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := lineCol(data, se.Offset)
		return fmt.Errorf("invalid JSON at line %d, column %d: %v", line, col, se)
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, max(col, 1)
}

// Members splits a JSON object into its members in order (jsonx.Members),
// rejecting a duplicate key (encoding/json would silently keep the last), in
// the words .meta errors and argument errors (toolsrv) have always used.
func Members(data []byte) ([]jsonx.Member, error) {
	ms, err := jsonx.Members(data)
	var dup *jsonx.DuplicateKeyError
	switch {
	case errors.As(err, &dup):
		return nil, fmt.Errorf("duplicate key %q", dup.Key)
	case errors.Is(err, jsonx.ErrNotObject):
		return nil, errors.New("not an object")
	case errors.Is(err, jsonx.ErrTrailing):
		return nil, errors.New("data after the object")
	case err != nil:
		return nil, err
	}
	return ms, nil
}

// object decodes an object at path, reporting a wrong type or a duplicate key.
func (p *parser) object(path string, raw json.RawMessage) ([]jsonx.Member, bool) {
	if k := JSONKind(raw); k != "an object" {
		p.errorf(path, "expected an object, got %s", k)
		return nil, false
	}
	ms, err := Members(raw)
	if err != nil {
		p.errorf(path, "%v", err)
		return nil, false
	}
	return ms, true
}

// JSONKind names the kind of a raw JSON value ("an object", "a string", …)
// in the words .meta errors and argument errors (toolsrv) both use.
func JSONKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// field parses one member shared by the top level and variants into f. It
// reports false for a key that is not such a field.
func (p *parser) field(path string, mb jsonx.Member, f *Fields) bool {
	at := join(path, mb.Key)
	switch mb.Key {
	case "description":
		if s, ok := p.str(at, mb.Value); ok {
			if strings.TrimSpace(s) == "" {
				p.errorf(at, "empty (expected a one-line summary of what the tool does)")
			}
			f.Description = &s
		}
	case "prompt":
		if s, ok := p.str(at, mb.Value); ok {
			f.Prompt = &s
		}
	case "args":
		// Args is set even when invalid, so that later checks know it was
		// declared; its error is already reported, and no Meta is returned.
		f.Args = mb.Value
		f.doc, f.args = p.args(at, mb.Value)
	case "tier":
		if s, ok := p.enum(at, mb.Value, "hot", "warm", "cold"); ok {
			t := tool.Tier(s)
			f.Tier = &t
		}
	case "readOnly":
		if b, ok := p.boolean(at, mb.Value); ok {
			f.ReadOnly = &b
		}
	case "scope":
		if s, ok := p.enum(at, mb.Value, "read", "write", "global"); ok {
			k, _ := tool.ParseScopeKind(s)
			f.Scope = &k
		}
	case "scopeArg":
		if s, ok := p.str(at, mb.Value); ok {
			if s == "" {
				p.errorf(at, "empty (expected the name of the argument that holds the path the tool writes)")
			}
			f.ScopeArg = &s
		}
	case "cmd":
		if s, ok := p.str(at, mb.Value); ok {
			switch {
			case s == "":
				p.errorf(at, "empty (expected an absolute path or a bare command name)")
			case !filepath.IsAbs(s) && strings.ContainsRune(s, '/'):
				p.errorf(at, "%q is a relative path (expected an absolute path, or a bare name looked up in the tools dir, then PATH)", s)
			}
			f.Cmd = &s
		}
	case "sudo":
		if b, ok := p.boolean(at, mb.Value); ok {
			f.Sudo = &b
		}
	case "elevated":
		if b, ok := p.boolean(at, mb.Value); ok {
			f.Elevated = &b
		}
	case "timeout":
		if d, ok := p.seconds(at, mb.Value); ok {
			f.Timeout = &d
		}
	case "replaySafe":
		if b, ok := p.boolean(at, mb.Value); ok {
			f.ReplaySafe = &b
		}
	default:
		return false
	}
	return true
}

func (p *parser) str(at string, raw json.RawMessage) (string, bool) {
	if k := JSONKind(raw); k != "a string" {
		p.errorf(at, "expected a string, got %s", k)
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.errorf(at, "%v", err)
		return "", false
	}
	return s, true
}

func (p *parser) boolean(at string, raw json.RawMessage) (bool, bool) {
	if k := JSONKind(raw); k != "a boolean" {
		p.errorf(at, "expected true or false, got %s", k)
		return false, false
	}
	return bytes.Equal(bytes.TrimSpace(raw), []byte("true")), true
}

func (p *parser) enum(at string, raw json.RawMessage, allowed ...string) (string, bool) {
	want := `"` + strings.Join(allowed, `", "`) + `"`
	if k := JSONKind(raw); k != "a string" {
		p.errorf(at, "expected one of %s, got %s", want, k)
		return "", false
	}
	var s string
	json.Unmarshal(raw, &s)
	if !slices.Contains(allowed, s) {
		p.errorf(at, "%q is not allowed (expected one of %s)", s, want)
		return "", false
	}
	return s, true
}

func (p *parser) seconds(at string, raw json.RawMessage) (time.Duration, bool) {
	const want = "a whole number of seconds, 0 for none"
	if k := JSONKind(raw); k != "a number" {
		p.errorf(at, "expected %s, got %s", want, k)
		return 0, false
	}
	n, err := json.Number(bytes.TrimSpace(raw)).Int64()
	if err != nil || n < 0 || n > MaxTimeout {
		p.errorf(at, "%s is not allowed (expected %s, at most %d)", bytes.TrimSpace(raw), want, MaxTimeout)
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

func (p *parser) variants(raw json.RawMessage) []Variant {
	if k := JSONKind(raw); k != "an array" {
		p.errorf("variants", "expected an array of objects, each with \"match\", got %s", k)
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.errorf("variants", "%v", err)
		return nil
	}
	if len(items) == 0 {
		p.errorf("variants", "empty (expected at least one variant, or no \"variants\" field)")
	}
	vs := make([]Variant, len(items))
	for i, item := range items {
		path := fmt.Sprintf("variants[%d]", i)
		ms, ok := p.object(path, item)
		if !ok {
			continue
		}
		hasMatch := false
		for _, mb := range ms {
			switch {
			case mb.Key == "match":
				hasMatch = true
				vs[i].Match = p.match(join(path, "match"), mb.Value)
			case mb.Key == "variants":
				p.errorf(path, "variants do not nest (a variant takes match and the top-level fields except variants)")
			case p.field(path, mb, &vs[i].Fields):
			default:
				want := append([]string{"match"}, fieldOrder[:len(fieldOrder)-1]...)
				p.errorf(path, "unknown field %q (expected %s)%s", mb.Key, strings.Join(want, ", "), didYouMean(mb.Key, want))
			}
		}
		if !hasMatch {
			p.errorf(path, "no \"match\" (expected an object of conditions: %s; {} always matches)", strings.Join(MatchKeys(), ", "))
		}
	}
	return vs
}

func (p *parser) match(path string, raw json.RawMessage) []Condition {
	ms, ok := p.object(path, raw)
	if !ok {
		return nil
	}
	matchKeys := MatchKeys()
	conds := make([]Condition, 0, len(ms))
	for _, mb := range ms {
		if !slices.Contains(matchKeys, mb.Key) {
			p.errorf(path, "unknown key %q (expected %s)%s", mb.Key, strings.Join(matchKeys, ", "), didYouMean(mb.Key, matchKeys))
			continue
		}
		at := join(path, mb.Key)
		v, ok := p.str(at, mb.Value)
		if !ok {
			continue
		}
		c, err := NewCondition(mb.Key, v)
		if err != nil {
			p.errorf(at, "%v", err)
			continue
		}
		conds = append(conds, c)
	}
	return conds
}

// checkResolved checks what only the merged fields show: every definition the
// host may pick has a description, and its scope fits readOnly and args.
func (p *parser) checkResolved(m *Meta, sawVariants bool) {
	if !sawVariants {
		p.checkDefinition("", m.Fields, Fields{})
		return
	}
	for i, v := range m.Variants {
		p.checkDefinition(fmt.Sprintf("variants[%d]", i), m.Fields, v.Fields)
	}
}

func (p *parser) checkDefinition(path string, top, v Fields) {
	f := Merge(top, v)
	// where reports the field as set in the variant, or at the top level.
	where := func(key string, inVariant bool) string {
		if inVariant {
			return join(path, key)
		}
		return key
	}
	if f.Description == nil {
		if path == "" {
			p.errorf("description", "missing (expected a one-line summary of what the tool does)")
		} else {
			p.errorf(join(path, "description"), "missing (set it at the top level or in this variant)")
		}
	}
	if f.ReadOnly != nil && *f.ReadOnly && f.Scope != nil && *f.Scope != tool.ScopeRead {
		p.errorf(where("scope", v.Scope != nil), "%q contradicts readOnly: true (a read-only tool has scope \"read\")", *f.Scope)
	}
	if f.Scope == nil || *f.Scope != tool.ScopeWrite || f.Args != nil && f.doc == nil {
		return
	}
	arg := "path"
	if f.ScopeArg != nil {
		arg = *f.ScopeArg
	}
	props, _ := f.doc["properties"].(map[string]any)
	if _, ok := props[arg]; !ok {
		p.errorf(where("scopeArg", v.ScopeArg != nil || v.Scope != nil), "%q is not a property of args (a write-scoped tool names the argument that holds the path it writes)", arg)
	}
}

// Merge gives the fields of variant v with the unset ones taken from top:
// the definition a host that picks v gets.
func Merge(top, v Fields) Fields {
	pick := func(a, b *string) *string {
		if a != nil {
			return a
		}
		return b
	}
	f := Fields{
		Description: pick(v.Description, top.Description),
		Prompt:      pick(v.Prompt, top.Prompt),
		ScopeArg:    pick(v.ScopeArg, top.ScopeArg),
		Cmd:         pick(v.Cmd, top.Cmd),
		Tier:        v.Tier,
		ReadOnly:    pickBool(v.ReadOnly, top.ReadOnly),
		Scope:       v.Scope,
		Sudo:        pickBool(v.Sudo, top.Sudo),
		Elevated:    pickBool(v.Elevated, top.Elevated),
		Timeout:     v.Timeout,
		ReplaySafe:  pickBool(v.ReplaySafe, top.ReplaySafe),
		Args:        v.Args, args: v.args, doc: v.doc,
	}
	if f.Tier == nil {
		f.Tier = top.Tier
	}
	if f.Scope == nil {
		f.Scope = top.Scope
	}
	if f.Timeout == nil {
		f.Timeout = top.Timeout
	}
	if f.Args == nil {
		f.Args, f.args, f.doc = top.Args, top.args, top.doc
	}
	return f
}

func pickBool(a, b *bool) *bool {
	if a != nil {
		return a
	}
	return b
}

// didYouMean suggests the known name a misspelt key differs from only in case.
func didYouMean(key string, known []string) string {
	if k, ok := jsonx.SimilarKey(key, known); ok {
		return fmt.Sprintf("; did you mean %q?", k)
	}
	return ""
}
