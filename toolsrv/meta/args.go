package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer words the schema library's messages.
var printer = message.NewPrinter(language.English)

// FlagNames are the dispatch flags: every tool's schema, as the model sees
// it, gets them as optional properties, and toolsrv.SplitFlags takes them
// out of a call's arguments before the tool sees them. A tool's own args may
// not use these names.
var FlagNames = []string{"bypass", "timeout", "sandbox", "background"}

// maxProblems bounds the problems ArgProblems lists; an anyOf can fail in
// many ways at once, and the model needs the first few.
const maxProblems = 8

// ArgProblems checks a call's own arguments (the dispatch flags already
// split off) against sch, an "args" schema as Parse compiled it (see
// Fields.ArgsSchema; nil admits any object). Each problem names the failing
// argument and why, in words meant for the model; none means the arguments
// conform.
func ArgProblems(sch *jsonschema.Schema, args json.RawMessage) []string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return []string{"arguments are not valid JSON: " + err.Error()}
	}
	if _, ok := v.(map[string]any); !ok {
		return []string{"arguments must be a JSON object, got " + JSONKind(args)}
	}
	if sch == nil {
		return nil
	}
	err = sch.Validate(v)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	} else if !errors.As(err, &ve) {
		return []string{err.Error()}
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
	return probs
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
	if k := JSONKind(raw); k != "an object" {
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
		p.errs = append(p.errs, &Error{File: p.file, Field: at, Err: err,
			Msg: fmt.Sprintf("invalid JSON Schema: $ref %q is outside the schema (expected a self-contained schema: $ref within it, like #/$defs/name)", le.URL)})
		return
	}
	if !errors.As(err, &sve) || !errors.As(sve.Err, &ve) {
		p.errs = append(p.errs, &Error{File: p.file, Field: at, Msg: "invalid JSON Schema: " + err.Error(), Err: err})
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
		p.errs = append(p.errs, &Error{File: p.file, Field: field, Msg: msg, Err: err})
	}
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
