package toolsrv

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
		want Scope
	}{
		{read, `{"path": "/etc"}`, "", Scope{Kind: ScopeRead}},
		{shell, `{"cmd": "rm -rf /"}`, "/", Scope{Kind: ScopeGlobal}},
		{write, `{"path": "/nonexistent/app/main.go"}`, "", Scope{ScopeWrite, "/nonexistent/app/main.go"}},
		{write, `{"path": "/nonexistent/app/../app/./main.go", "timeout": 5}`, "", Scope{ScopeWrite, "/nonexistent/app/main.go"}},
		{write, `{"path": "main.go"}`, "/nonexistent/app", Scope{ScopeWrite, "/nonexistent/app/main.go"}},
		{write, `{"path": "../lib/x.go"}`, "/nonexistent/app", Scope{ScopeWrite, "/nonexistent/lib/x.go"}},
		{write, `{"path": "main.go"}`, "", Scope{Kind: ScopeGlobal}},
		{write, `{"path": "main.go"}`, "relative/cwd", Scope{Kind: ScopeGlobal}},
		{write, `{}`, "/nonexistent", Scope{Kind: ScopeGlobal}},
		{write, `{"path": ""}`, "/nonexistent", Scope{Kind: ScopeGlobal}},
		{write, `{"path": 3}`, "/nonexistent", Scope{Kind: ScopeGlobal}},
		{write, `not json`, "/nonexistent", Scope{Kind: ScopeGlobal}},
		{write, `{"path": "link/sub/new.txt"}`, root, Scope{ScopeWrite, filepath.Join(real, "sub", "new.txt")}},
		{write, `{"path": "` + link + `"}`, "", Scope{ScopeWrite, real}},
		{target, `{"from": "/a", "to": "/b"}`, "", Scope{ScopeWrite, "/b"}},
	}
	for _, tt := range tests {
		if got := tt.tool.Scope(json.RawMessage(tt.args), tt.cwd); got != tt.want {
			t.Errorf("%s %s (cwd %q): got %v, want %v", tt.tool.Name, tt.args, tt.cwd, got, tt.want)
		}
	}
}

func TestConflicts(t *testing.T) {
	r, g := Scope{Kind: ScopeRead}, Scope{Kind: ScopeGlobal}
	w := func(p string) Scope { return Scope{ScopeWrite, p} }
	tests := []struct {
		a, b Scope
		want bool
	}{
		{r, r, false},
		{r, w("/a"), false},
		{r, g, true},
		{g, g, true},
		{g, w("/a"), true},
		{w("/a"), w("/a"), true},
		{w("/a"), w("/b"), false},
		{w("/a"), w("/a/b"), true},  // a write to a directory touches what is in it
		{w("/a/b"), w("/a"), true},  // both ways
		{w("/a"), w("/ab"), false},  // a prefix of the name is not a parent
		{w("/"), w("/etc/x"), true}, // the root holds everything
		{w(""), r, true},            // a pathless write is global...
		{w(""), w("/a"), true},      // ...and conflicts with any write
		{Scope{}, r, true},          // the zero Scope is global
	}
	for _, tt := range tests {
		if got := Conflicts(tt.a, tt.b); got != tt.want {
			t.Errorf("Conflicts(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := Conflicts(tt.b, tt.a); got != tt.want {
			t.Errorf("Conflicts(%v, %v) = %v, want %v (not symmetric)", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestBatches(t *testing.T) {
	r, g := Scope{Kind: ScopeRead}, Scope{Kind: ScopeGlobal}
	w := func(p string) Scope { return Scope{ScopeWrite, p} }
	tests := []struct {
		name  string
		calls []Scope
		want  string
	}{
		{"none", nil, "[]"},
		{"reads together", []Scope{r, r, r}, "[[0 1 2]]"},
		{"writes to different paths together", []Scope{w("/a"), w("/b"), w("/c")}, "[[0 1 2]]"},
		{"same path in order", []Scope{w("/a"), w("/a"), w("/a")}, "[[0] [1] [2]]"},
		{"a later call fills an earlier wave", []Scope{w("/a"), w("/a"), w("/b")}, "[[0 2] [1]]"},
		{"global alone, a barrier both ways", []Scope{r, w("/a"), g, r, w("/b")}, "[[0 1] [2] [3 4]]"},
		{"global first", []Scope{g, r, r}, "[[0] [1 2]]"},
		{"two globals", []Scope{g, g}, "[[0] [1]]"},
		{"never overtakes a conflicting call", []Scope{w("/a"), w("/a"), w("/a/x"), w("/b")}, "[[0 3] [1] [2]]"},
		{"reads beside writes of the same path", []Scope{w("/a"), r, w("/a")}, "[[0 1] [2]]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Batches(tt.calls)
			if s := fmt.Sprint(got); s != tt.want {
				t.Fatalf("got %s, want %s", s, tt.want)
			}
			// The invariant: a call runs in a later wave than every earlier
			// call it conflicts with.
			wave := map[int]int{}
			for w, idx := range got {
				for _, i := range idx {
					wave[i] = w
				}
			}
			for i := range tt.calls {
				for j := range i {
					if Conflicts(tt.calls[i], tt.calls[j]) && wave[i] <= wave[j] {
						t.Errorf("call %d (%v) is not after conflicting call %d (%v)", i, tt.calls[i], j, tt.calls[j])
					}
				}
			}
		})
	}
}
