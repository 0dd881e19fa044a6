package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// maxSideFiles bounds how many files beside a skill are listed.
const maxSideFiles = 64

// MaxSideFileSize bounds a file beside a skill that ReadFile returns.
const MaxSideFileSize = 64 << 10

// Files lists the files beside a folder skill's SKILL.md, as paths
// relative to its folder, sorted; none for NAME.md. Hidden files, symbolic
// links and what lies past maxSideFiles are left out.
func (s *Skill) Files() []string {
	if s.Dir == "" {
		return nil
	}
	var out []string
	filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.Dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(s.Dir, p)
		if rel == "SKILL.md" {
			return nil
		}
		if len(out) == maxSideFiles {
			return fs.SkipAll
		}
		out = append(out, rel)
		return nil
	})
	return out
}

// Text is what an agent reads when it loads the skill: the body, the tools
// it expects, and the files beside it, which the agent reads through the
// same tool (load_skill with "file"), since the sandbox keeps its own tools
// out of the data directory.
func (s *Skill) Text() string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(s.Body))
	b.WriteString("\n")
	if len(s.Tools) > 0 {
		fmt.Fprintf(&b, "\nThis skill expects the tools: %s.\n", strings.Join(s.Tools, ", "))
	}
	if files := s.Files(); len(files) > 0 {
		fmt.Fprintf(&b, "\nFiles beside this skill (read one with load_skill, name %q and file set to its path):\n", s.Name)
		for _, f := range files {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// ErrNoFile is wrapped by ReadFile's error for a path that is not one of
// Files.
var ErrNoFile = errors.New("no such file beside the skill")

// ReadFile returns a file beside the skill, by its path as Files lists it;
// only those, so that a model's path cannot leave the skill's folder.
func (s *Skill) ReadFile(rel string) (string, error) {
	ok := false
	for _, f := range s.Files() {
		ok = ok || f == rel
	}
	if !ok {
		list := strings.Join(s.Files(), ", ")
		if list == "" {
			list = "none"
		}
		return "", fmt.Errorf("skills: %s: %w %q (files: %s)", s.Name, ErrNoFile, rel, list)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, rel))
	if err != nil {
		return "", fmt.Errorf("skills: %s: %w", s.Name, err)
	}
	if len(data) > MaxSideFileSize {
		return "", fmt.Errorf("skills: %s: %s is %d bytes, more than the %d KiB a load returns", s.Name, rel, len(data), MaxSideFileSize>>10)
	}
	if !utf8.Valid(data) {
		return "", fmt.Errorf("skills: %s: %s is not text", s.Name, rel)
	}
	return string(data), nil
}
