package toolsrv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer words the schema library's messages.
var printer = message.NewPrinter(language.English)

// FlagNames are the dispatch flags: every tool's schema, as the model sees
// it, gets them as optional properties, and SplitFlags takes them out of a
// call's arguments before the tool sees them. A tool's own args may not use
// these names.
var FlagNames = []string{"bypass", "timeout", "sandbox", "background"}

// Flags are the dispatch flags of one call.
type Flags struct {
	// Bypass asks to run outside the sandbox; it needs approval.
	Bypass bool
	// Timeout, when TimeoutSet, replaces the tool's timeout; 0 means none.
	Timeout    time.Duration
	TimeoutSet bool
	// Sandbox names a sandbox profile; "" is the default profile.
	Sandbox string
	// Background runs the call as a background process, without a timeout.
	Background bool
}

// TimeoutFor is the timeout a call of t with these flags runs under: none
// in the background, else the flag's when set, else the tool's. 0 means none.
func (f Flags) TimeoutFor(t *Tool) time.Duration {
	switch {
	case f.Background:
		return 0
	case f.TimeoutSet:
		return f.Timeout
	}
	return t.Timeout
}

// sandboxNameRE keeps a profile name a plain file name (no "/" nor "..").
var sandboxNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$`)

// ArgError says why a call's arguments were refused, in words meant for the
// model: each problem names the argument and what was wrong.
type ArgError struct {
	Tool     string   // "" when not known (SplitFlags)
	Problems []string // e.g. `missing required argument "path"`
}

func (e *ArgError) Error() string { return "toolsrv: " + e.Message() }

// Message is the text for the model, without the package prefix.
func (e *ArgError) Message() string {
	what := "invalid arguments"
	if e.Tool != "" {
		what = "invalid arguments for " + e.Tool
	}
	return what + ": " + strings.Join(e.Problems, "; ")
}

// maxProblems bounds the problems an ArgError lists; an anyOf can fail in
// many ways at once, and the model needs the first few.
const maxProblems = 8

// SplitFlags takes the dispatch flags out of a call's arguments: it returns
// them and the remaining arguments, which are exactly what the tool gets on
// stdin. Other members keep their order and bytes. Empty or null arguments
// are the empty object. A flag that is null counts as absent. A flag of the
// wrong type, arguments that are not a JSON object, or a duplicate key give
// an *ArgError.
func SplitFlags(args json.RawMessage) (Flags, json.RawMessage, error) {
	var fl Flags
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return fl, json.RawMessage("{}"), nil
	}
	if k := jsonKind(trimmed); k != "an object" {
		return fl, nil, &ArgError{Problems: []string{"arguments must be a JSON object, got " + k}}
	}
	ms, err := members(trimmed)
	if err != nil {
		return fl, nil, &ArgError{Problems: []string{"arguments are not valid JSON: " + err.Error()}}
	}
	var probs []string
	sawFlag := false
	var rest bytes.Buffer
	rest.WriteByte('{')
	for _, mb := range ms {
		if !slices.Contains(FlagNames, mb.key) {
			if rest.Len() > 1 {
				rest.WriteByte(',')
			}
			k, _ := json.Marshal(mb.key)
			rest.Write(k)
			rest.WriteByte(':')
			rest.Write(mb.val)
			continue
		}
		sawFlag = true
		if jsonKind(mb.val) == "null" {
			continue
		}
		if p := fl.set(mb.key, mb.val); p != "" {
			probs = append(probs, p)
		}
	}
	rest.WriteByte('}')
	if len(probs) > 0 {
		return Flags{}, nil, &ArgError{Problems: probs}
	}
	if !sawFlag { // keep the caller's bytes
		return fl, trimmed, nil
	}
	return fl, rest.Bytes(), nil
}

// set parses one flag, returning a problem for the model or "".
func (f *Flags) set(key string, raw json.RawMessage) string {
	switch key {
	case "bypass", "background":
		if jsonKind(raw) != "a boolean" {
			return fmt.Sprintf("flag %q must be true or false, got %s", key, jsonKind(raw))
		}
		b := string(bytes.TrimSpace(raw)) == "true"
		if key == "bypass" {
			f.Bypass = b
		} else {
			f.Background = b
		}
	case "timeout":
		const want = "flag \"timeout\" must be a whole number of seconds, 0 for none"
		if jsonKind(raw) != "a number" {
			return fmt.Sprintf("%s, got %s", want, jsonKind(raw))
		}
		n, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if err != nil || n < 0 || n != float64(int64(n)) || n > maxTimeout {
			return fmt.Sprintf("%s, got %s", want, bytes.TrimSpace(raw))
		}
		f.Timeout, f.TimeoutSet = time.Duration(n)*time.Second, true
	case "sandbox":
		var s string
		if jsonKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
			return fmt.Sprintf("flag \"sandbox\" must be a profile name (a string), got %s", jsonKind(raw))
		}
		if !sandboxNameRE.MatchString(s) {
			return fmt.Sprintf("flag \"sandbox\": %q is not a profile name (letters, digits, _ and -)", s)
		}
		f.Sandbox = s
	}
	return ""
}

// Validate checks a call's own arguments (the dispatch flags already split
// off) against the tool's args schema. It returns an *ArgError naming each
// failing argument and why.
func (t *Tool) Validate(args json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgError{Tool: t.Name, Problems: []string{"arguments are not valid JSON: " + err.Error()}}
	}
	if _, ok := v.(map[string]any); !ok {
		return &ArgError{Tool: t.Name, Problems: []string{"arguments must be a JSON object, got " + jsonKind(args)}}
	}
	if t.args == nil {
		return nil
	}
	err = t.args.Validate(v)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	} else if !errors.As(err, &ve) {
		return &ArgError{Tool: t.Name, Problems: []string{err.Error()}}
	}
	ls := leaves(ve)
	sortLeaves(ls)
	var probs []string
	for _, leaf := range ls {
		if len(probs) == maxProblems {
			probs = append(probs, "…")
			break
		}
		probs = append(probs, argProblem(leaf))
	}
	return &ArgError{Tool: t.Name, Problems: probs}
}

// Prepare is the check before a call runs: SplitFlags, then Validate. It
// returns the flags and the arguments the tool gets on stdin.
func (t *Tool) Prepare(args json.RawMessage) (Flags, json.RawMessage, error) {
	fl, own, err := SplitFlags(args)
	if err != nil {
		var ae *ArgError
		if errors.As(err, &ae) {
			ae.Tool = t.Name
		}
		return Flags{}, nil, err
	}
	if err := t.Validate(own); err != nil {
		return Flags{}, nil, err
	}
	return fl, own, nil
}

// leaves are the innermost validation errors, the ones that say what failed.
func leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// sortLeaves orders errors by where they are, since the schema library
// walks properties in map order.
func sortLeaves(ls []*jsonschema.ValidationError) {
	slices.SortStableFunc(ls, func(a, b *jsonschema.ValidationError) int {
		return slices.Compare(a.InstanceLocation, b.InstanceLocation)
	})
}

// argProblem words one failed check for the model, naming the argument.
func argProblem(ve *jsonschema.ValidationError) string {
	loc := instancePath(ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		names := make([]string, len(k.Missing))
		for i, m := range k.Missing {
			names[i] = strconv.Quote(join(loc, m))
		}
		if len(names) == 1 {
			return "missing required argument " + names[0]
		}
		return "missing required arguments " + strings.Join(names, ", ")
	case *kind.AdditionalProperties:
		names := make([]string, len(k.Properties))
		for i, m := range k.Properties {
			names[i] = strconv.Quote(join(loc, m))
		}
		if len(names) == 1 {
			return "unknown argument " + names[0]
		}
		return "unknown arguments " + strings.Join(names, ", ")
	}
	msg := ve.ErrorKind.LocalizedString(printer)
	if loc == "" {
		return "arguments: " + msg
	}
	return fmt.Sprintf("argument %q: %s", loc, msg)
}

// instancePath renders a JSON pointer's tokens as a.b[0].c.
func instancePath(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		if _, err := strconv.Atoi(t); err == nil && b.Len() > 0 {
			b.WriteString("[" + t + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

// argsURL names a tool's schema inside its own compiler. It is hierarchical
// so that a relative $ref resolves beside it, where no loader answers.
const argsURL = "ollie:///args.json"

// args parses and compiles an "args" JSON Schema at path. It is nil on error.
func (p *parser) args(at string, raw json.RawMessage) (map[string]any, *jsonschema.Schema) {
	if k := jsonKind(raw); k != "an object" {
		p.errorf(at, "expected a JSON Schema object, got %s", k)
		return nil, nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		p.errorf(at, "%v", err)
		return nil, nil
	}
	doc := v.(map[string]any)
	n := len(p.errs)
	if t, ok := doc["type"]; ok && t != "object" {
		p.errorf(join(at, "type"), "%s (expected \"object\": a tool's arguments are a JSON object)", compactJSON(t))
	}
	if props, ok := doc["properties"].(map[string]any); ok {
		for _, f := range FlagNames {
			if _, ok := props[f]; ok {
				p.errorf(join(at, "properties."+f), "%q is a dispatch flag every tool gets (%s); rename the argument", f, strings.Join(FlagNames, ", "))
			}
		}
	}
	if req, ok := doc["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok && slices.Contains(FlagNames, s) {
				p.errorf(join(at, "required"), "%q is a dispatch flag every tool gets; it cannot be required", s)
			}
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// A tool's schema stands alone: no $ref reaches the file system or network.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(argsURL, doc); err != nil {
		p.errorf(at, "invalid JSON Schema: %v", err)
		return nil, nil
	}
	sch, err := c.Compile(argsURL)
	if err != nil {
		p.schemaError(at, err)
		return nil, nil
	}
	// A $ref cycle shows only when validating; one that every object meets
	// shows on the empty one.
	var ve *jsonschema.ValidationError
	if errors.As(sch.Validate(map[string]any{}), &ve) {
		for _, leaf := range leaves(ve) {
			if _, ok := leaf.ErrorKind.(*kind.RefCycle); ok {
				p.errorf(at, "invalid JSON Schema: %s", leaf.ErrorKind.LocalizedString(printer))
				break
			}
		}
	}
	if len(p.errs) > n {
		return nil, nil
	}
	return doc, sch
}

// schemaError reports a schema that failed to compile, naming the field
// inside args where the metaschema check failed.
func (p *parser) schemaError(at string, err error) {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		p.errs = append(p.errs, &MetaError{File: p.file, Field: at, Err: err,
			Msg: fmt.Sprintf("invalid JSON Schema: $ref %q is outside the schema (expected a self-contained schema: $ref within it, like #/$defs/name)", le.URL)})
		return
	}
	if !errors.As(err, &sve) || !errors.As(sve.Err, &ve) {
		p.errs = append(p.errs, &MetaError{File: p.file, Field: at, Msg: "invalid JSON Schema: " + err.Error(), Err: err})
		return
	}
	// The metaschema's anyOf fails in several ways for one mistake; the first
	// failure of each field is the one that reads right.
	ls := leaves(ve)
	sortLeaves(ls)
	seen := map[string]bool{}
	for _, leaf := range ls {
		field := at
		if loc := instancePath(leaf.InstanceLocation); loc != "" {
			field = join(at, loc)
		}
		if seen[field] {
			continue
		}
		seen[field] = true
		msg := "invalid JSON Schema: " + leaf.ErrorKind.LocalizedString(printer)
		p.errs = append(p.errs, &MetaError{File: p.file, Field: field, Msg: msg, Err: err})
	}
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// flagSchemas are the dispatch flags as the model sees them.
func flagSchemas(toolTimeout time.Duration) map[string]any {
	def := "none"
	if toolTimeout > 0 {
		def = strconv.Itoa(int(toolTimeout / time.Second))
	}
	return map[string]any{
		"bypass": map[string]any{
			"type":        "boolean",
			"description": "Run outside the sandbox. Needs the user's approval; use only when the sandbox blocks the work.",
		},
		"timeout": map[string]any{
			"type":        "integer",
			"minimum":     0,
			"description": "Timeout in seconds, 0 for none (default " + def + ").",
		},
		"sandbox": map[string]any{
			"type":        "string",
			"description": "Sandbox profile to run under (default: the session's).",
		},
		"background": map[string]any{
			"type":        "boolean",
			"description": "Run in the background: returns a process id at once; the output arrives in later turns.",
		},
	}
}

// modelSchema is a tool's args schema with the dispatch flags added: what
// the model is shown.
func modelSchema(doc map[string]any, timeout time.Duration) json.RawMessage {
	out := make(map[string]any, len(doc)+2)
	for k, v := range doc {
		out[k] = v
	}
	out["type"] = "object"
	props := map[string]any{}
	if p, ok := doc["properties"].(map[string]any); ok {
		for k, v := range p {
			props[k] = v
		}
	}
	for k, v := range flagSchemas(timeout) {
		props[k] = v
	}
	out["properties"] = props
	b, err := json.Marshal(out)
	if err != nil { // doc came from JSON, so it marshals back
		panic("toolsrv: " + err.Error())
	}
	return b
}
