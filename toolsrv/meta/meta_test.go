package meta

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/toolsrv/tool"
)

const fieldList = "description, prompt, args, tier, readOnly, scope, scopeArg, cmd, sudo, elevated, timeout, replaySafe"

// malformedMeta is every kind of bad .meta and the errors it must
// produce, each naming the file, the field and what was expected.
var malformedMeta = []struct {
	name string
	file string // default x.meta
	meta string
	want []string // "FILE: " is prefixed
}{
	{
		name: "unknown top-level field",
		meta: `{"description": "d", "comand": "ls"}`,
		want: []string{`unknown field "comand" (expected ` + fieldList + `, variants)`},
	},
	{
		name: "unknown field differing in case",
		meta: `{"description": "d", "readonly": true}`,
		want: []string{`unknown field "readonly" (expected ` + fieldList + `, variants); did you mean "readOnly"?`},
	},
	{
		name: "unknown field in a variant",
		meta: `{"description": "d", "variants": [{"match": {}}, {"match": {}, "command": "x"}]}`,
		want: []string{`variants[1]: unknown field "command" (expected match, ` + fieldList + `)`},
	},
	{
		name: "variants do not nest",
		meta: `{"description": "d", "variants": [{"match": {}, "variants": []}]}`,
		want: []string{`variants[0]: variants do not nest (a variant takes match and the top-level fields except variants)`},
	},
	{
		name: "invalid JSON",
		meta: "{\n  \"description\": \"d\",\n  \"cmd\": ls\n}",
		want: []string{`invalid JSON at line 3, column 10: invalid character 'l' looking for beginning of value`},
	},
	{
		name: "not an object",
		meta: `["description"]`,
		want: []string{`expected an object, got an array`},
	},
	{
		name: "duplicate key",
		meta: `{"description": "d", "cmd": "a", "cmd": "b"}`,
		want: []string{`duplicate key "cmd"`},
	},
	{
		name: "wrong types",
		meta: `{"description": 1, "prompt": ["p"], "readOnly": "yes", "sudo": 1, "elevated": null,
			"cmd": null, "replaySafe": "true", "scopeArg": false}`,
		want: []string{
			`description: expected a string, got a number`,
			`prompt: expected a string, got an array`,
			`readOnly: expected true or false, got a string`,
			`sudo: expected true or false, got a number`,
			`elevated: expected true or false, got null`,
			`cmd: expected a string, got null`,
			`replaySafe: expected true or false, got a string`,
			`scopeArg: expected a string, got a boolean`,
			`description: missing (expected a one-line summary of what the tool does)`,
		},
	},
	{
		name: "enums",
		meta: `{"description": "d", "tier": "lukewarm", "scope": 1}`,
		want: []string{
			`tier: "lukewarm" is not allowed (expected one of "hot", "warm", "cold")`,
			`scope: expected one of "read", "write", "global", got a number`,
		},
	},
	{
		name: "timeouts",
		meta: `{"description": "d", "variants": [{"match": {}, "timeout": "30"}, {"match": {}, "timeout": 1.5}, {"match": {}, "timeout": -1}]}`,
		want: []string{
			`variants[0].timeout: expected a whole number of seconds, 0 for none, got a string`,
			`variants[1].timeout: 1.5 is not allowed (expected a whole number of seconds, 0 for none, at most 2147483648)`,
			`variants[2].timeout: -1 is not allowed (expected a whole number of seconds, 0 for none, at most 2147483648)`,
		},
	},
	{
		name: "empty description",
		meta: `{"description": "  "}`,
		want: []string{`description: empty (expected a one-line summary of what the tool does)`},
	},
	{
		name: "missing description",
		meta: `{"cmd": "ls"}`,
		want: []string{`description: missing (expected a one-line summary of what the tool does)`},
	},
	{
		name: "a variant without a description of its own or inherited",
		meta: `{"variants": [{"match": {}, "description": "a"}, {"match": {}}]}`,
		want: []string{`variants[1].description: missing (set it at the top level or in this variant)`},
	},
	{
		name: "variants not an array",
		meta: `{"description": "d", "variants": {"match": {}}}`,
		want: []string{`variants: expected an array of objects, each with "match", got an object`},
	},
	{
		name: "variants empty",
		meta: `{"description": "d", "variants": []}`,
		want: []string{`variants: empty (expected at least one variant, or no "variants" field)`},
	},
	{
		name: "variant not an object",
		meta: `{"description": "d", "variants": ["linux"]}`,
		want: []string{`variants[0]: expected an object, got a string`},
	},
	{
		name: "variant without match",
		meta: `{"description": "d", "variants": [{"match": {"os": "linux"}}, {"cmd": "x"}]}`,
		want: []string{`variants[1]: no "match" (expected an object of conditions: binary, file, os, arch, env, nenv; {} always matches)`},
	},
	{
		name: "unknown match key",
		file: "system_logs.meta",
		meta: `{"description": "d", "variants": [{"match": {"binary": "journalctl"}}, {"match": {"bin": "x"}}]}`,
		want: []string{`variants[1].match: unknown key "bin" (expected binary, file, os, arch, env, nenv)`},
	},
	{
		name: "bad match values",
		meta: `{"description": "d", "variants": [{"match": {"binary": "bin/x", "file": "var/log", "os": "linxu",
			"arch": "x64", "env": "A=B", "nenv": 1}}, {"match": "linux"}]}`,
		want: []string{
			`variants[0].match.binary: "bin/x" (expected a bare name looked up in PATH, or an absolute path)`,
			`variants[0].match.file: "var/log" (expected an absolute path)`,
			`variants[0].match.os: unknown "linxu" (expected a GOOS: ` + strings.Join(knownOS, ", ") + `)`,
			`variants[0].match.arch: unknown "x64" (expected a GOARCH: ` + strings.Join(knownArch, ", ") + `)`,
			`variants[0].match.env: "A=B" (expected an environment variable name)`,
			`variants[0].match.nenv: expected a string, got a number`,
			`variants[1].match: expected an object, got a string`,
		},
	},
	{
		name: "bad tool name",
		file: "System-Logs.meta",
		meta: `{"description": "d"}`,
		want: []string{`tool name "System-Logs" (the file name without .meta) must match ^[a-z][a-z0-9_]{0,63}$`},
	},
	{
		name: "tool name too long",
		file: strings.Repeat("a", 65) + ".meta",
		meta: `{"description": "d"}`,
		want: []string{`tool name "` + strings.Repeat("a", 65) + `" (the file name without .meta) must match ^[a-z][a-z0-9_]{0,63}$`},
	},
	{
		name: "cmd relative path",
		meta: `{"description": "d", "cmd": "bin/tool"}`,
		want: []string{`cmd: "bin/tool" is a relative path (expected an absolute path, or a bare name looked up in the tools dir, then PATH)`},
	},
	{
		name: "args not an object",
		meta: `{"description": "d", "args": ["path"]}`,
		want: []string{`args: expected a JSON Schema object, got an array`},
	},
	{
		name: "args not of type object",
		meta: `{"description": "d", "args": {"type": "string"}}`,
		want: []string{`args.type: "string" (expected "object": a tool's arguments are a JSON object)`},
	},
	{
		name: "invalid JSON Schema",
		meta: `{"description": "d", "args": {"type": "object", "properties": {"path": {"type": "strin"}, "n": {"minimum": "1"}}}}`,
		want: []string{
			`args.properties.n.minimum: invalid JSON Schema: got string, want number`,
			`args.properties.path.type: invalid JSON Schema: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'`,
		},
	},
	{
		name: "invalid JSON Schema in a variant",
		meta: `{"description": "d", "variants": [{"match": {}, "args": {"required": "path"}}]}`,
		want: []string{`variants[0].args.required: invalid JSON Schema: got string, want array`},
	},
	{
		name: "schema reaching outside itself",
		meta: `{"description": "d", "args": {"properties": {"p": {"$ref": "https://example.com/s.json"}}}}`,
		want: []string{`args: invalid JSON Schema: $ref "https://example.com/s.json" is outside the schema (expected a self-contained schema: $ref within it, like #/$defs/name)`},
	},
	{
		name: "schema with a reference cycle",
		meta: `{"description": "d", "args": {"$ref": "#"}}`,
		want: []string{`args: invalid JSON Schema: both /$ref and  resolve to "ollie:///args.json#" causing reference cycle`},
	},
	{
		name: "dispatch flag clash",
		meta: `{"description": "d", "args": {"properties": {"timeout": {"type": "integer"}, "path": {}}, "required": ["background"]}}`,
		want: []string{
			`args.properties.timeout: "timeout" is a dispatch flag every tool gets (bypass, timeout, sandbox, background); rename the argument`,
			`args.required: "background" is a dispatch flag every tool gets; it cannot be required`,
		},
	},
	{
		name: "readOnly contradicts scope",
		meta: `{"description": "d", "readOnly": true, "variants": [{"match": {}, "scope": "write"}, {"match": {}, "readOnly": false, "scope": "write"}]}`,
		want: []string{
			`variants[0].scope: "write" contradicts readOnly: true (a read-only tool has scope "read")`,
			`variants[0].scopeArg: "path" is not a property of args (a write-scoped tool names the argument that holds the path it writes)`,
			`variants[1].scopeArg: "path" is not a property of args (a write-scoped tool names the argument that holds the path it writes)`,
		},
	},
	{
		name: "scopeArg not an argument",
		meta: `{"description": "d", "scope": "write", "scopeArg": "file", "args": {"properties": {"path": {"type": "string"}}}}`,
		want: []string{`scopeArg: "file" is not a property of args (a write-scoped tool names the argument that holds the path it writes)`},
	},
}

// TestMalformedMeta parses each of malformedMeta and checks its errors.
func TestMalformedMeta(t *testing.T) {
	for _, tt := range malformedMeta {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.file
			if name == "" {
				name = "x.meta"
			}
			file := filepath.Join("tools", name)
			m, err := Parse(file, []byte(tt.meta))
			if err == nil {
				t.Fatalf("parsed: %+v", m)
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var me *Error
				if !errors.As(e, &me) || me.File != file {
					t.Errorf("error %v is not a *Error about %s", e, file)
				}
				got = append(got, e.Error())
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, file+": "+w)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestParse(t *testing.T) {
	src := `{
		"description": "Edit a file.",
		"prompt": "## file_edit",
		"args": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}},
		"tier": "warm",
		"scope": "write",
		"cmd": "/usr/local/bin/edit",
		"elevated": true,
		"timeout": 0,
		"replaySafe": false,
		"variants": [{"match": {"os": "linux", "env": "HOME"}, "sudo": true}, {"match": {}}]
	}`
	m := mustParse(t, "tools/file_edit.meta", src)
	if m.Name != "file_edit" || *m.Description != "Edit a file." || *m.Tier != tool.TierWarm || *m.Scope != tool.ScopeWrite ||
		*m.Cmd != "/usr/local/bin/edit" || !*m.Elevated || *m.Timeout != 0 || *m.ReplaySafe || m.ReadOnly != nil || m.Sudo != nil {
		t.Errorf("top level parsed wrong: %+v", m.Fields)
	}
	if len(m.Variants) != 2 || len(m.Variants[0].Match) != 2 || m.Variants[0].Match[0] != (Condition{"os", "linux"}) ||
		m.Variants[0].Match[1] != (Condition{"env", "HOME"}) || !*m.Variants[0].Sudo || len(m.Variants[1].Match) != 0 {
		t.Errorf("variants parsed wrong: %+v", m.Variants)
	}
}

// TestSeedExamples parses the .meta examples of the seed (toolsrv/testdata)
// as written.
func TestSeedExamples(t *testing.T) {
	ents, err := os.ReadDir(filepath.Join("..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".meta" {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", "testdata", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(e.Name(), data); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func FuzzParse(f *testing.F) {
	seed, _ := os.ReadFile("../testdata/system_logs.meta")
	f.Add(seed)
	f.Add([]byte(`{"description": "d", "args": {"properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}}}`))
	f.Add([]byte(`{"variants": [{"match": {"os": "linux"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse("f.meta", data)
		if (m == nil) == (err == nil) {
			t.Fatalf("Parse returned %v and %v", m, err)
		}
		if m != nil {
			for _, v := range m.Variants {
				Merge(m.Fields, v.Fields)
			}
		}
	})
}

func mustParse(t *testing.T, file, content string) *Meta {
	t.Helper()
	m, err := Parse(file, []byte(content))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m
}
