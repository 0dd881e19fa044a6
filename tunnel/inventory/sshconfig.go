package inventory

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"ollie/internal/paths"
)

// maxIncludeDepth bounds Include chains, as ssh's own limit does.
const maxIncludeDepth = 16

// sshConfigFiles are the files tunnel reads: the one named alone, else
// ~/.ssh/config then /etc/ssh/ssh_config (those that exist).
func sshConfigFiles(named string) []string {
	if named != "" {
		return []string{named}
	}
	home, _ := paths.Home()
	return []string{filepath.Join(home, ".ssh", "config"), "/etc/ssh/ssh_config"}
}

// sshConfigHosts lists the literal names of the Host lines of the ssh
// config files and the files they Include, in the order ssh reads them:
// the names a pattern such as web* can stand for. Patterns (*, ?, !x)
// are not names and are left out.
func sshConfigHosts(named string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for i, f := range sshConfigFiles(named) {
		err := scanSSHConfig(f, f == "/etc/ssh/ssh_config" && named == "", 0, func(n string) {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		})
		if errors.Is(err, os.ErrNotExist) && (named == "" || i > 0) {
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

func scanSSHConfig(file string, system bool, depth int, add func(string)) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		key, rest := sshKeyword(sc.Text())
		switch strings.ToLower(key) {
		case "host":
			words, err := splitWords(rest, true)
			if err != nil {
				return fmt.Errorf("inventory: ssh config %s:%d: %v", file, line, err)
			}
			for _, w := range words {
				if !strings.ContainsAny(w, "*?!") && plainWord(w) {
					add(w)
				}
			}
		case "include":
			if depth >= maxIncludeDepth {
				return fmt.Errorf("inventory: ssh config %s:%d: Include nested more than %d deep", file, line, maxIncludeDepth)
			}
			words, err := splitWords(rest, true)
			if err != nil {
				return fmt.Errorf("inventory: ssh config %s:%d: %v", file, line, err)
			}
			for _, w := range words {
				for _, inc := range includeFiles(w, system) {
					if err := scanSSHConfig(inc, system, depth+1, add); err != nil && !errors.Is(err, os.ErrNotExist) {
						return err
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("inventory: ssh config %s: %w", file, err)
	}
	return nil
}

// sshKeyword splits a config line into its keyword and the rest: ssh
// takes "Key value", "Key=value" and "Key = value".
func sshKeyword(line string) (key, rest string) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", ""
	}
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return line, ""
	}
	key, rest = line[:i], strings.TrimSpace(line[i:])
	return key, strings.TrimSpace(strings.TrimPrefix(rest, "="))
}

// includeFiles expands an Include argument: ~ is the home directory, and
// a relative path is under ~/.ssh (or /etc/ssh for the system file).
func includeFiles(p string, system bool) []string {
	home, _ := paths.Home()
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = filepath.Join(home, p[2:])
	case !filepath.IsAbs(p) && system:
		p = filepath.Join("/etc/ssh", p)
	case !filepath.IsAbs(p):
		p = filepath.Join(home, ".ssh", p)
	}
	m, err := filepath.Glob(p)
	if err != nil {
		return nil
	}
	return m
}
