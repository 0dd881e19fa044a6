package tool

import (
	"encoding/json"
	"fmt"
	"testing"
)

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

// The loop schedules by the declaration it was sent, not by the .meta, so
// the scope words in a FunctionDecl must give what the runner's own do.
func TestCallScope(t *testing.T) {
	tests := []struct {
		decl FunctionDecl
		args string
		want Scope
	}{
		{FunctionDecl{Scope: "read"}, `{"path": "/a"}`, Scope{Kind: ScopeRead}},
		{FunctionDecl{Scope: "global"}, `{}`, Scope{Kind: ScopeGlobal}},
		{FunctionDecl{Scope: "write", ScopeArg: "path"}, `{"path": "x.go"}`, Scope{ScopeWrite, "/nonexistent/app/x.go"}},
		{FunctionDecl{Scope: "write", ScopeArg: "to"}, `{"from": "/a", "to": "/b"}`, Scope{ScopeWrite, "/b"}},
		{FunctionDecl{Scope: "write", ScopeArg: "to"}, `{"from": "/a"}`, Scope{Kind: ScopeGlobal}},
		{FunctionDecl{Scope: ""}, `{}`, Scope{Kind: ScopeGlobal}},         // unset: the safe kind
		{FunctionDecl{Scope: "sideways"}, `{}`, Scope{Kind: ScopeGlobal}}, // a word this side does not know
	}
	for _, tt := range tests {
		if got := tt.decl.CallScope(json.RawMessage(tt.args), "/nonexistent/app"); got != tt.want {
			t.Errorf("%+v with %s: got %v, want %v", tt.decl, tt.args, got, tt.want)
		}
	}
}
