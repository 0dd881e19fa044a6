package toolsrv

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"ollie/toolsrv/meta"
)

func TestSplitFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		flags   Flags
		rest    string
		wantErr string
	}{
		{name: "no flags: bytes kept", args: `{"path": "a",  "n": [1, 2]}`, rest: `{"path": "a",  "n": [1, 2]}`},
		{name: "empty", args: ``, rest: `{}`},
		{name: "null", args: `null`, rest: `{}`},
		{name: "empty object", args: ` {} `, rest: `{}`},
		{
			name:  "every flag, order and bytes of the rest kept",
			args:  `{"b": 1, "bypass": true, "timeout": 30, "a": [1, 2], "sandbox": "net-off", "background": false, "c": {"x": "y"}}`,
			flags: Flags{Bypass: true, Timeout: 30 * time.Second, TimeoutSet: true, Sandbox: "net-off"},
			rest:  `{"b":1,"a":[1, 2],"c":{"x": "y"}}`,
		},
		{name: "timeout 0 is set, and means none", args: `{"timeout": 0}`, flags: Flags{TimeoutSet: true}, rest: `{}`},
		{name: "whole float timeout", args: `{"timeout": 5.0}`, flags: Flags{Timeout: 5 * time.Second, TimeoutSet: true}, rest: `{}`},
		{name: "null flags are absent", args: `{"timeout": null, "sandbox": null, "x": null}`, rest: `{"x":null}`},
		{name: "background", args: `{"background": true, "cmd": "make"}`, flags: Flags{Background: true}, rest: `{"cmd":"make"}`},
		{name: "not an object", args: `["a"]`, wantErr: `invalid arguments: arguments must be a JSON object, got an array`},
		{name: "duplicate key", args: `{"a": 1, "a": 2}`, wantErr: `invalid arguments: arguments are not valid JSON: duplicate key "a"`},
		{
			name: "wrong types",
			args: `{"bypass": "yes", "timeout": "30", "sandbox": 1, "background": 1}`,
			wantErr: `invalid arguments: flag "bypass" must be true or false, got a string; ` +
				`flag "timeout" must be a whole number of seconds, 0 for none, got a string; ` +
				`flag "sandbox" must be a profile name (a string), got a number; ` +
				`flag "background" must be true or false, got a number`,
		},
		{name: "negative timeout", args: `{"timeout": -1}`, wantErr: `invalid arguments: flag "timeout" must be a whole number of seconds, 0 for none, got -1`},
		{name: "fractional timeout", args: `{"timeout": 1.5}`, wantErr: `invalid arguments: flag "timeout" must be a whole number of seconds, 0 for none, got 1.5`},
		{name: "sandbox path", args: `{"sandbox": "../../etc/x"}`, wantErr: `invalid arguments: flag "sandbox": "../../etc/x" is not a profile name (letters, digits, _ and -)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fl, rest, err := SplitFlags(json.RawMessage(tt.args))
			if tt.wantErr != "" {
				var ae *ArgError
				if !errors.As(err, &ae) || ae.Message() != tt.wantErr {
					t.Fatalf("got %v, want *ArgError %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fl != tt.flags || string(rest) != tt.rest {
				t.Errorf("got %+v %s, want %+v %s", fl, rest, tt.flags, tt.rest)
			}
		})
	}
}

func TestTimeoutFor(t *testing.T) {
	tool := &Tool{Timeout: 60 * time.Second}
	tests := []struct {
		flags Flags
		want  time.Duration
	}{
		{Flags{}, 60 * time.Second},
		{Flags{Timeout: 5 * time.Second, TimeoutSet: true}, 5 * time.Second},
		{Flags{TimeoutSet: true}, 0},
		{Flags{Background: true, Timeout: 5 * time.Second, TimeoutSet: true}, 0},
	}
	for _, tt := range tests {
		if got := tt.flags.TimeoutFor(tool); got != tt.want {
			t.Errorf("%+v: got %v, want %v", tt.flags, got, tt.want)
		}
	}
}

// resolveOne resolves a .meta with an executable in its tools dir.
func resolveOne(t *testing.T, name, meta string) *Tool {
	t.Helper()
	dir := t.TempDir()
	writeExec(t, dir, name)
	tool, ex := Resolve(mustParse(t, filepath.Join(dir, name+".meta"), meta), dir, &fakeHost{root: dir, goos: "linux", goarch: "amd64"})
	if tool == nil {
		t.Fatalf("not resolved: %s", ex)
	}
	return tool
}

// TestValidate checks the messages the model gets for bad arguments.
func TestValidate(t *testing.T) {
	tool := resolveOne(t, "file_read", `{"description": "Read a file.", "args": {
		"type": "object", "required": ["path"], "additionalProperties": false,
		"properties": {
			"path": {"type": "string", "minLength": 1},
			"lines": {"type": "integer", "minimum": 1},
			"mode": {"enum": ["text", "hex"]},
			"ranges": {"type": "array", "items": {"type": "object", "required": ["from"], "properties": {"from": {"type": "integer"}}}}
		}}}`)
	tests := []struct {
		args string
		want string // "" when valid
	}{
		{`{"path": "/etc/hosts"}`, ""},
		{`{"path": "a", "lines": 10, "mode": "hex", "ranges": [{"from": 1}]}`, ""},
		{`{}`, `invalid arguments for file_read: missing required argument "path"`},
		{`{"path": 1}`, `invalid arguments for file_read: argument "path": got number, want string`},
		{`{"path": ""}`, `invalid arguments for file_read: argument "path": minLength: got 0, want 1`},
		{`{"path": "a", "lines": "10"}`, `invalid arguments for file_read: argument "lines": got string, want integer`},
		{`{"path": "a", "lines": 0}`, `invalid arguments for file_read: argument "lines": minimum: got 0, want 1`},
		{`{"path": "a", "mode": "bin"}`, `invalid arguments for file_read: argument "mode": value must be one of 'text', 'hex'`},
		{`{"path": "a", "ranges": [{"from": 1}, {}]}`, `invalid arguments for file_read: missing required argument "ranges[1].from"`},
		{`{"path": "a", "recursive": true}`, `invalid arguments for file_read: unknown argument "recursive"`},
		{`{"lines": 0, "extra": 1}`, `invalid arguments for file_read: missing required argument "path"; unknown argument "extra"; argument "lines": minimum: got 0, want 1`},
		{`[]`, `invalid arguments for file_read: arguments must be a JSON object, got an array`},
		{`{"path": "a"`, `invalid arguments for file_read: arguments are not valid JSON: unexpected EOF`},
	}
	for _, tt := range tests {
		err := tool.Validate(json.RawMessage(tt.args))
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.args, err)
			}
			continue
		}
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Message() != tt.want || err.Error() != "toolsrv: "+tt.want {
			t.Errorf("%s:\n got %v\nwant %s", tt.args, err, tt.want)
		}
	}
}

func TestPrepare(t *testing.T) {
	tool := resolveOne(t, "shell", `{"description": "Run a command.", "timeout": 60,
		"args": {"type": "object", "required": ["cmd"], "additionalProperties": false, "properties": {"cmd": {"type": "string"}}}}`)
	fl, own, err := tool.Prepare(json.RawMessage(`{"cmd": "make", "timeout": 600, "background": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(own) != `{"cmd":"make"}` || !fl.Background || fl.TimeoutFor(tool) != 0 {
		t.Errorf("got %+v %s", fl, own)
	}
	// Flags are not the tool's arguments, even with additionalProperties false.
	if _, _, err := tool.Prepare(json.RawMessage(`{"cmd": "ls", "bypass": true}`)); err != nil {
		t.Errorf("bypass refused: %v", err)
	}
	_, _, err = tool.Prepare(json.RawMessage(`{"timeout": "x"}`))
	var ae *ArgError
	if !errors.As(err, &ae) || ae.Tool != "shell" {
		t.Errorf("got %v, want an *ArgError for shell", err)
	}
}

// TestSchema checks the schema shown to the model: the tool's own plus the
// four dispatch flags, while Args stays as declared.
func TestSchema(t *testing.T) {
	const args = `{"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}`
	tests := []struct {
		name, meta string
		own        string
		props      []string
		timeout    string
	}{
		{"with args", `{"description": "d", "timeout": 15, "args": ` + args + `}`, args,
			[]string{"background", "bypass", "path", "sandbox", "timeout"}, "Timeout in seconds, 0 for none (default 15)."},
		{"no args", `{"description": "d", "timeout": 0}`, `{"properties":{},"type":"object"}`,
			[]string{"background", "bypass", "sandbox", "timeout"}, "Timeout in seconds, 0 for none (default none)."},
		{"args without type", `{"description": "d", "args": {"properties": {"q": {}}}}`, `{"properties": {"q": {}}}`,
			[]string{"background", "bypass", "q", "sandbox", "timeout"}, "Timeout in seconds, 0 for none (default 120)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := resolveOne(t, "x", tt.meta)
			if string(tool.Args()) != tt.own {
				t.Errorf("Args() = %s, want %s", tool.Args(), tt.own)
			}
			var s struct {
				Type       string
				Required   []string
				Properties map[string]struct {
					Type        string
					Description string
				}
			}
			if err := json.Unmarshal(tool.Schema(), &s); err != nil {
				t.Fatal(err)
			}
			var props []string
			for p := range s.Properties {
				props = append(props, p)
			}
			slices.Sort(props)
			if s.Type != "object" || !slices.Equal(props, tt.props) || slices.ContainsFunc(s.Required, func(r string) bool { return slices.Contains(meta.FlagNames, r) }) {
				t.Errorf("Schema() = %s", tool.Schema())
			}
			want := map[string]string{"bypass": "boolean", "timeout": "integer", "sandbox": "string", "background": "boolean"}
			for f, typ := range want {
				if s.Properties[f].Type != typ || s.Properties[f].Description == "" {
					t.Errorf("flag %s: %+v", f, s.Properties[f])
				}
			}
			if got := s.Properties["timeout"].Description; got != tt.timeout {
				t.Errorf("timeout description %q, want %q", got, tt.timeout)
			}
		})
	}
}

func FuzzSplitFlags(f *testing.F) {
	f.Add([]byte(`{"b": 1, "bypass": true, "timeout": 30, "a": [1, 2], "sandbox": "x", "background": false}`))
	f.Add([]byte(`{"timeout": null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, rest, err := SplitFlags(data)
		if err != nil {
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an *ArgError", err)
			}
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(rest, &obj); err != nil {
			t.Fatalf("rest %q is not a JSON object: %v", rest, err)
		}
		for _, fl := range meta.FlagNames {
			if _, ok := obj[fl]; ok {
				t.Fatalf("rest %q still holds flag %q", rest, fl)
			}
		}
	})
}
