// Package meta is the declaration of a tool: the .meta contract (see
// toolsrv/README.md). Parse reads a .meta strictly, each problem an *Error
// naming the file and the field; a Variant's Conditions say which hosts it
// applies to, checked on a Host; Merge gives the definition a host that
// picks a variant gets; ArgProblems checks a call's arguments against the
// declared JSON Schema. Finding the executable and running the tool stay in
// package toolsrv.
//
// It is a leaf: it links no package that serves 9P, sandboxes or asks for
// approval, so that a package which only declares what a host must offer
// (package skills shares the conditions) links none of that.
// internal/layout tests this. It trusts nothing in what it parses.
package meta

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"ollie/internal/jsonx"
)

// Condition is one entry of a variant's "match": Key is binary, file, os,
// arch, env or nenv.
type Condition struct {
	Key, Value string
}

func (c Condition) String() string { return fmt.Sprintf("%s %q", c.Key, c.Value) }

// matchKeys lists the keys of a variant's "match".
var matchKeys = []string{"binary", "file", "os", "arch", "env", "nenv"}

// knownOS and knownArch are `go tool dist list`, so that a typo in a match
// ("linxu") is a load error rather than a variant that never matches.
var (
	knownOS = []string{"aix", "android", "darwin", "dragonfly", "freebsd", "illumos", "ios",
		"js", "linux", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows"}
	knownArch = []string{"386", "amd64", "arm", "arm64", "loong64", "mips", "mips64", "mips64le",
		"mipsle", "ppc64", "ppc64le", "riscv64", "s390x", "wasm"}
)

// MatchKeys lists the keys of a condition, in the order errors name them.
func MatchKeys() []string { return slices.Clone(matchKeys) }

// NewCondition checks one condition as a variant's "match" does, so that
// skills (package skills) declare conditions in the same words: a key of
// MatchKeys and a value of the form that key takes. Its error says what was
// expected; the caller names the file and the field.
func NewCondition(key, v string) (Condition, error) {
	switch key {
	case "binary":
		if v == "" || !filepath.IsAbs(v) && strings.ContainsRune(v, '/') {
			return Condition{}, fmt.Errorf("%q (expected a bare name looked up in PATH, or an absolute path)", v)
		}
	case "file":
		if !filepath.IsAbs(v) {
			return Condition{}, fmt.Errorf("%q (expected an absolute path)", v)
		}
	case "os":
		if !slices.Contains(knownOS, v) {
			return Condition{}, fmt.Errorf("unknown %q (expected a GOOS: %s)", v, strings.Join(knownOS, ", "))
		}
	case "arch":
		if !slices.Contains(knownArch, v) {
			return Condition{}, fmt.Errorf("unknown %q (expected a GOARCH: %s)", v, strings.Join(knownArch, ", "))
		}
	case "env", "nenv":
		if v == "" || strings.ContainsAny(v, "=\x00") {
			return Condition{}, fmt.Errorf("%q (expected an environment variable name)", v)
		}
	default:
		msg := fmt.Sprintf("unknown key %q (expected %s)", key, strings.Join(matchKeys, ", "))
		if k, ok := jsonx.SimilarKey(key, matchKeys); ok {
			msg += fmt.Sprintf("; did you mean %q?", k)
		}
		return Condition{}, errors.New(msg)
	}
	return Condition{key, v}, nil
}
