package toolsrv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"ollie/toolsrv/tool"
)

func TestToolScope(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.MkdirAll(filepath.Join(real, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	write := resolveOne(t, "file_write", `{"description": "d", "scope": "write",
		"args": {"type": "object", "properties": {"path": {"type": "string"}}}}`)
	target := resolveOne(t, "file_move", `{"description": "d", "scope": "write", "scopeArg": "to",
		"args": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}}}`)
	read := resolveOne(t, "file_read", `{"description": "d", "readOnly": true}`)
	shell := resolveOne(t, "shell", `{"description": "d"}`)

	tests := []struct {
		tool *Tool
		args string
		cwd  string
		want tool.Scope
	}{
		{read, `{"path": "/etc"}`, "", tool.Scope{Kind: tool.ScopeRead}},
		{shell, `{"cmd": "rm -rf /"}`, "/", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `{"path": "/nonexistent/app/main.go"}`, "", tool.Scope{Kind: tool.ScopeWrite, Path: "/nonexistent/app/main.go"}},
		{write, `{"path": "/nonexistent/app/../app/./main.go", "timeout": 5}`, "", tool.Scope{Kind: tool.ScopeWrite, Path: "/nonexistent/app/main.go"}},
		{write, `{"path": "main.go"}`, "/nonexistent/app", tool.Scope{Kind: tool.ScopeWrite, Path: "/nonexistent/app/main.go"}},
		{write, `{"path": "../lib/x.go"}`, "/nonexistent/app", tool.Scope{Kind: tool.ScopeWrite, Path: "/nonexistent/lib/x.go"}},
		{write, `{"path": "main.go"}`, "", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `{"path": "main.go"}`, "relative/cwd", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `{}`, "/nonexistent", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `{"path": ""}`, "/nonexistent", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `{"path": 3}`, "/nonexistent", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `not json`, "/nonexistent", tool.Scope{Kind: tool.ScopeGlobal}},
		{write, `{"path": "link/sub/new.txt"}`, root, tool.Scope{Kind: tool.ScopeWrite, Path: filepath.Join(real, "sub", "new.txt")}},
		{write, `{"path": "` + link + `"}`, "", tool.Scope{Kind: tool.ScopeWrite, Path: real}},
		{target, `{"from": "/a", "to": "/b"}`, "", tool.Scope{Kind: tool.ScopeWrite, Path: "/b"}},
	}
	for _, tt := range tests {
		if got := tt.tool.Scope(json.RawMessage(tt.args), tt.cwd); got != tt.want {
			t.Errorf("%s %s (cwd %q): got %v, want %v", tt.tool.Name, tt.args, tt.cwd, got, tt.want)
		}
	}
}
