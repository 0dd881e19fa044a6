package layout_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// running are the packages that serve, sandbox, approve or run an agent:
// what a package that only declares things (tools, skills, the wire's
// words) must not link, so that importing a declaration never drags in the
// 9P server, Landlock, the broker or the engine.
var running = []string{
	"ollie/ns", // the 9P server itself; ns/words and ns/client are other packages
	"ollie/toolsrv",
	"ollie/toolsrv/sandbox",
	"ollie/broker", // the protocol too: a declaration asks no one
	"ollie/broker/gate",
	"ollie/broker/desktop",
	"ollie/agent",
}

// rules say which packages each package may not link, directly or not.
// A new rule is one line.
var rules = []struct {
	pkg        string
	mayNotLink []string
}{
	{"ollie/skills", running},
	{"ollie/agent/wire", running},
	{"ollie/ns/words", running},
	{"ollie/toolsrv/meta", running},
	{"ollie/toolsrv/tool", running},

	// The approval protocol is a leaf both ends import: the host's gate,
	// the tool runner, the desktop and the Ansible module each link it,
	// and it links none of them.
	{"ollie/broker", []string{"ollie/ns", "ollie/toolsrv", "ollie/toolsrv/sandbox", "ollie/broker/gate", "ollie/broker/desktop", "ollie/agent", "ollie/host"}},
	{"ollie/toolsrv", []string{"ollie/broker/gate", "ollie/broker/desktop"}},

	// The clients of a namespace (the chat, the ollie command, the
	// appliance listener and its SFTP, the daemon's starter) speak 9P over a
	// socket: none of them links the namespace that answers them.
	{"ollie/chat", withHost},
	{"ollie/shell", withHost},
	{"ollie/appliance", withHost},
	{"ollie/appliance/sftpns", withHost},
	{"ollie/host/daemon", withHost},
	{"ollie/ns/client", withHost},

	// The desktop reads the backends file to give a host its model, and
	// never talks to a model itself: it links no model client (issue 33:
	// ollie-remote went from 28 to 12 MB).
	{"ollie/cmd/ollie-remote", []string{"github.com/openai/openai-go/v3"}},
	{"ollie/agent/backend/config", []string{"github.com/openai/openai-go/v3", "github.com/ollama/ollama/api"}},
	// The host speaks one endpoint of OpenAI's API: importing openai-go's
	// root package would link all of the API through its init (issue 33:
	// olliesrv went from 31 to 13 MB without it).
	{"ollie/cmd/olliesrv", []string{"github.com/openai/openai-go/v3", "github.com/openai/openai-go/v3/responses", "github.com/openai/openai-go/v3/realtime"}},

	// ns is the protocol and the server: what it serves is declared on top
	// of it, never inside it.
	{"ollie/ns", []string{"ollie/host", "ollie/agent", "ollie/toolsrv", "ollie/broker", "ollie/tunnel"}},
}

// withHost is running and the host's namespace built on it.
var withHost = append(slices.Clip(running), "ollie/host")

func TestDependencyRules(t *testing.T) {
	root := moduleRoot(t)
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			imports := importGraph(t, root, r.pkg)
			for _, bad := range r.mayNotLink {
				if chain := importChain(imports, r.pkg, bad); chain != nil {
					t.Errorf("%s links %s, which it may not: %s", r.pkg, bad, strings.Join(chain, " -> "))
				}
			}
		})
	}
}

// moduleRoot is the directory of go.mod, so that go list sees the module
// whatever directory the test runs in.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatal("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod)
}

// importGraph is what go list -deps says of pkg: every package it links,
// each with its own imports, so that a broken rule can show the chain.
func importGraph(t *testing.T, root, pkg string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-buildvcs=false", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) > 0 {
			imports[fields[0]] = fields[1:]
		}
	}
	if _, ok := imports[pkg]; !ok {
		t.Fatalf("go list -deps %s does not list %s itself:\n%s", pkg, pkg, out)
	}
	return imports
}

// importChain is a shortest chain of imports from pkg to target, both
// included, or nil when pkg does not link target.
func importChain(imports map[string][]string, pkg, target string) []string {
	if _, ok := imports[target]; !ok {
		return nil
	}
	from := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{pkg, "…", target} // linked, though no chain was found
}
