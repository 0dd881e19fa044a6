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

	"ollie/toolsrv/meta"
)

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
	if k := meta.JSONKind(trimmed); k != "an object" {
		return fl, nil, &ArgError{Problems: []string{"arguments must be a JSON object, got " + k}}
	}
	ms, err := meta.Members(trimmed)
	if err != nil {
		return fl, nil, &ArgError{Problems: []string{"arguments are not valid JSON: " + err.Error()}}
	}
	var probs []string
	sawFlag := false
	var rest bytes.Buffer
	rest.WriteByte('{')
	for _, mb := range ms {
		if !slices.Contains(meta.FlagNames, mb.Key) {
			if rest.Len() > 1 {
				rest.WriteByte(',')
			}
			k, _ := json.Marshal(mb.Key)
			rest.Write(k)
			rest.WriteByte(':')
			rest.Write(mb.Value)
			continue
		}
		sawFlag = true
		if meta.JSONKind(mb.Value) == "null" {
			continue
		}
		if p := fl.set(mb.Key, mb.Value); p != "" {
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
		if meta.JSONKind(raw) != "a boolean" {
			return fmt.Sprintf("flag %q must be true or false, got %s", key, meta.JSONKind(raw))
		}
		b := string(bytes.TrimSpace(raw)) == "true"
		if key == "bypass" {
			f.Bypass = b
		} else {
			f.Background = b
		}
	case "timeout":
		const want = "flag \"timeout\" must be a whole number of seconds, 0 for none"
		if meta.JSONKind(raw) != "a number" {
			return fmt.Sprintf("%s, got %s", want, meta.JSONKind(raw))
		}
		n, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if err != nil || n < 0 || n != float64(int64(n)) || n > meta.MaxTimeout {
			return fmt.Sprintf("%s, got %s", want, bytes.TrimSpace(raw))
		}
		f.Timeout, f.TimeoutSet = time.Duration(n)*time.Second, true
	case "sandbox":
		var s string
		if meta.JSONKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
			return fmt.Sprintf("flag \"sandbox\" must be a profile name (a string), got %s", meta.JSONKind(raw))
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
	if probs := meta.ArgProblems(t.args, args); len(probs) > 0 {
		return &ArgError{Tool: t.Name, Problems: probs}
	}
	return nil
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
