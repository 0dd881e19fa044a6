package skills_test

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"ollie/skills"
	"ollie/toolsrv/meta"
)

// host is a made-up machine for the examples: the binaries in bins are in
// its PATH, and it has no files and no environment.
type host struct{ bins []string }

func (h host) LookPath(file string) (string, error) {
	for _, b := range h.bins {
		if b == file {
			return "/usr/bin/" + file, nil
		}
	}
	return "", errors.New("not found")
}
func (host) Stat(name string) (fs.FileInfo, error) { return nil, fs.ErrNotExist }
func (host) Getenv(key string) string              { return "" }
func (host) GOOS() string                          { return "linux" }
func (host) GOARCH() string                        { return "amd64" }

// A skill parsed from its file's bytes: its name, its one-line description,
// and its "when" conditions evaluated on a Debian host and an Alpine one.
func ExampleParse() {
	const text = `---
name: debian-packages
description: Install and query packages with apt on Debian and Ubuntu.
when:
  binary: apt-get
  os: linux
tools: [shell]
---
# Debian packages

Use apt-get install -y; query with dpkg -l.
`
	s, err := skills.Parse("debian-packages.md", []byte(text))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("name:", s.Name)
	fmt.Println("description:", s.Description)
	fmt.Println("tools:", s.Tools)
	for _, h := range []struct {
		name string
		host meta.Host
	}{
		{"debian", host{bins: []string{"apt-get"}}},
		{"alpine", host{bins: []string{"apk"}}},
	} {
		for _, c := range s.When {
			ck := c.On(h.host)
			fmt.Printf("%s: %s: %v (%s)\n", h.name, c, ck.OK, ck.Detail)
		}
	}
	// Output:
	// name: debian-packages
	// description: Install and query packages with apt on Debian and Ubuntu.
	// tools: [shell]
	// debian: binary "apt-get": true (binary "apt-get" found at /usr/bin/apt-get)
	// debian: os "linux": true (os is "linux")
	// alpine: binary "apt-get": false (binary "apt-get" not found in PATH)
	// alpine: os "linux": true (os is "linux")
}

// A mistake in a skill file is an error naming the file, the line and the
// field; every mistake is reported at once.
func ExampleParse_errors() {
	_, err := skills.Parse("apt.md", []byte("---\nname: apt\nwhen:\n  os: linxu\n---\nUse apt-get.\n"))
	fmt.Println(err)
	// Output:
	// skills: apt.md:4: when.os: unknown "linxu" (expected a GOOS: aix, android, darwin, dragonfly, freebsd, illumos, ios, js, linux, netbsd, openbsd, plan9, solaris, wasip1, windows)
	// skills: apt.md:2: description: missing (expected one line saying when the skill helps)
}

// The same directory of skills resolved on two hosts: each offers the
// skills whose conditions hold there and says why of every one.
func ExampleCatalog_Resolve() {
	dir, err := os.MkdirTemp("", "skills-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"debian-packages.md": "---\nname: debian-packages\ndescription: Packages with apt.\nwhen:\n  binary: apt-get\n---\nUse apt-get.\n",
		"namespace.md":       "---\nname: namespace\ndescription: The ollie namespace.\n---\nRead /help.\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	for _, h := range []struct {
		name string
		host meta.Host
	}{
		{"debian", host{bins: []string{"apt-get"}}},
		{"alpine", host{bins: []string{"apk"}}},
	} {
		c := skills.Catalog{Dirs: []string{dir}, Host: h.host}
		for _, e := range c.Resolve() {
			fmt.Printf("%s: %s: %s (%s)\n", h.name, e.Name, e.Status, e.Reason())
		}
	}
	// Output:
	// debian: debian-packages: offered (binary "apt-get" found at /usr/bin/apt-get)
	// debian: namespace: offered (no conditions)
	// alpine: debian-packages: skipped (binary "apt-get" not found in PATH)
	// alpine: namespace: offered (no conditions)
}
