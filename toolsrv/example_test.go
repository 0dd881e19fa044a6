package toolsrv_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"

	"ollie/toolsrv"
)

// host is a made-up machine whose PATH is empty and which runs linux/amd64
// with no environment; Stat sees the real files, so that executables in
// the tools dir resolve.
type host struct{}

func (host) LookPath(file string) (string, error)  { return "", errors.New("not found") }
func (host) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }
func (host) Getenv(key string) string              { return "" }
func (host) GOOS() string                          { return "linux" }
func (host) GOARCH() string                        { return "amd64" }

// A tools dir of four .meta files loaded on a made-up host: what `olliesrv
// tools` says of each (available, hidden, broken, or not parsed), then a
// call's arguments checked as they are before the tool runs.
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "toolsrv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		// Available: its executable, named after it, is in the tools dir.
		"greet.meta": `{"description": "Greet someone.", "readOnly": true,
			"args": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}`,
		"greet": "#!/bin/sh\necho hello\n",
		// Hidden: no variant matches this host.
		"system_logs.meta": `{"description": "Read system logs.", "variants": [
			{"match": {"binary": "journalctl"}, "cmd": "system_logs_journald"},
			{"match": {"file": "/nonexistent/syslog"}, "cmd": "system_logs_syslog"}]}`,
		// Broken: the definition applies, but its cmd is nowhere.
		"backup.meta": `{"description": "Back up a directory.", "cmd": "restic"}`,
		// Not parsed: a misspelt field.
		"sync.meta": `{"description": "Sync files.", "readonly": true}`,
	}
	for name, text := range files {
		mode := fs.FileMode(0o644)
		if !strings.HasSuffix(name, ".meta") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
			log.Fatal(err)
		}
	}
	// rel hides where the temporary dir is.
	rel := func(s string) string { return strings.ReplaceAll(s, dir, "$TOOLS") }

	reg := toolsrv.Load([]string{dir}, host{})
	for _, e := range reg.Explain() {
		fmt.Println(rel(e.String()))
	}
	for _, err := range reg.Errors() {
		fmt.Println("error:", rel(err.Error()))
	}
	fmt.Println(len(reg.Tools()), "tools available")

	greet, _ := reg.Tool("greet")
	fmt.Println(greet.Description, "scope:", greet.ScopeKind, "timeout:", greet.Timeout)
	for _, args := range []string{`{"name": "glenda", "timeout": 5}`, `{"nom": "glenda"}`} {
		flags, own, err := greet.Prepare(json.RawMessage(args))
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("stdin %s, timeout %v\n", own, flags.TimeoutFor(greet))
	}
	// Output:
	// backup ($TOOLS/backup.meta): no variants
	//   executable: none: $TOOLS/backup.meta: cmd: cmd "restic" is neither in the tools dir $TOOLS nor in PATH
	// greet ($TOOLS/greet.meta): no variants
	//   executable: $TOOLS/greet (named after the tool, in its tools dir)
	// system_logs ($TOOLS/system_logs.meta): hidden: no variant matches this host
	//   variants[0] skipped: binary "journalctl" not found in PATH
	//   variants[1] skipped: file "/nonexistent/syslog" does not exist
	// error: $TOOLS/backup.meta: cmd: cmd "restic" is neither in the tools dir $TOOLS nor in PATH
	// error: $TOOLS/sync.meta: unknown field "readonly" (expected description, prompt, args, tier, readOnly, scope, scopeArg, cmd, sudo, elevated, timeout, replaySafe, variants); did you mean "readOnly"?
	// 1 tools available
	// Greet someone. scope: read timeout: 2m0s
	// stdin {"name":"glenda"}, timeout 5s
	// toolsrv: invalid arguments for greet: missing required argument "name"
}
