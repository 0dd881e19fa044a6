package sandbox

import (
	"os"
	"strings"
)

// envAllowed reports whether the variable name matches the allowlist:
// an entry is a name, a prefix ending in *, or * alone for everything.
func envAllowed(name string, allow []string) bool {
	for _, pat := range allow {
		if prefix, ok := strings.CutSuffix(pat, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == pat {
			return true
		}
	}
	return false
}

// filterEnv returns the NAME=value entries of environ whose names the
// allowlist admits, in their order.
func filterEnv(environ, allow []string) []string {
	out := []string{}
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && name != "" && envAllowed(name, allow) {
			out = append(out, kv)
		}
	}
	return out
}

// withNoNS passes noNSEnv on to a helper when it is set: the helper
// starts its confining stages without a mount namespace.
func withNoNS(env []string) []string {
	if v := os.Getenv(noNSEnv); v != "" {
		env = append(env, noNSEnv+"="+v)
	}
	return env
}
