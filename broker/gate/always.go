package gate

// A host's "always" answers. A tool approved "always" through
// bypass/pending is approved from then on while no desktop broker is
// connected, and the answer is kept in a file of the host's own, so that
// it outlasts the daemon as the desktop's policy file does:
//
//	# Tools approved "always" through bypass/pending on this host: one name
//	# a line. Remove a line to be asked again.
//	# always, answered for request 3f2a…
//	fix_nginx

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"ollie/broker"
	"ollie/internal/paths"
)

// DefaultAlwaysPath is ~/.config/ollie/bypass-always, or its equivalent
// under XDG_CONFIG_HOME.
func DefaultAlwaysPath() (string, error) {
	file, ok := paths.UserDir("bypass-always")
	if !ok {
		return "", errors.New("broker: where is the always file? neither XDG_CONFIG_HOME nor HOME is an absolute path")
	}
	return file, nil
}

// alwaysHeader starts a file SaveAlways creates.
const alwaysHeader = "# Tools approved \"always\" through bypass/pending on this host: one name\n# a line. Remove a line to be asked again.\n"

// LoadAlways reads the tools approved "always" in file: a name a line;
// blank lines and lines starting with # are skipped. A missing file holds
// none; a line that is not a tool's name is an error naming the file and
// the line.
func LoadAlways(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("broker: reading %s: %w", file, err)
	}
	var tools []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !plainToolName(line) {
			return nil, fmt.Errorf("%w: %s:%d: %q is not a tool's name", broker.ErrPolicy, file, i+1, line)
		}
		tools = append(tools, line)
	}
	return tools, nil
}

// SaveAlways adds tool to file, with a comment naming the request it
// answered, unless it is there already. The file is replaced atomically
// with mode 0600; its directory is made with mode 0700. A file that no
// longer reads is left alone (the error is returned).
func SaveAlways(file, tool, id string) error {
	if !plainToolName(tool) {
		return fmt.Errorf("broker: cannot save \"always\" for %q: not a tool's name", tool)
	}
	have, err := LoadAlways(file)
	if err != nil {
		return err
	}
	for _, t := range have {
		if t == tool {
			return nil
		}
	}
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var b bytes.Buffer
	if len(data) == 0 {
		b.WriteString(alwaysHeader)
	}
	b.Write(data)
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		b.WriteByte('\n')
	}
	// The id is the asker's word: kept only if it is plain.
	if plainToolName(id) {
		fmt.Fprintf(&b, "# always, answered for request %s\n", id)
	}
	b.WriteString(tool + "\n")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("broker: always file directory: %w", err)
	}
	if err := paths.WriteFileAtomic(file, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("broker: saving %s: %w", file, err)
	}
	return nil
}

// plainToolName reports whether s can be one line of the always file:
// printable, without spaces, not a comment.
func plainToolName(s string) bool {
	if s == "" || len(s) > 256 || strings.HasPrefix(s, "#") {
		return false
	}
	for _, c := range s {
		if !unicode.IsPrint(c) || unicode.IsSpace(c) {
			return false
		}
	}
	return true
}

// AllowAlways approves tools "always" on this gate, as an "always"
// written to bypass/pending does: while no desktop broker is connected,
// their requests (but an agent's bypass of one call) are approved.
func (g *Gate) AllowAlways(tools ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range tools {
		g.always[t] = true
	}
}

// AlwaysAllowed reports whether tool was approved "always".
func (g *Gate) AlwaysAllowed(tool string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.always[tool]
}
