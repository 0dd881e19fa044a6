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

// helperEnv is a helper's whole environment.
func helperEnv() []string { return withNoNS(runtimeEnv()) }

// withNoNS passes noNSEnv on to a helper when it is set: the helper
// starts its confining stages without a mount namespace. Otherwise it
// passes ownProcEnv when the host gives each call its own /proc.
func withNoNS(env []string) []string {
	if v := os.Getenv(noNSEnv); v != "" {
		return append(env, noNSEnv+"="+v)
	}
	// A helper passes on what its parent probed; the parent probes once.
	if IsHelper() {
		if v := os.Getenv(ownProcEnv); v != "" {
			env = append(env, ownProcEnv+"="+v)
		}
	} else if os.Getenv(noOwnProcEnv) == "" && HostProtection().OwnProc {
		env = append(env, ownProcEnv+"=1")
	}
	return env
}
