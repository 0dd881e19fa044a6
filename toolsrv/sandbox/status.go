package sandbox

import "strings"

// Describe says, loudly when it matters, how tools are confined
// on this host under the default profile.
func Describe(cwd string) string {
	prof, err := DefaultProfiles().Load("default")
	if err != nil {
		return "TOOLS WILL NOT RUN: " + err.Error()
	}
	p, err := prof.Resolve(Vars{CWD: cwd})
	if err != nil {
		return "TOOLS WILL NOT RUN: " + err.Error()
	}
	if err := p.Check(); err != nil {
		return "TOOLS WILL NOT RUN: " + err.Error()
	}
	e := p.Enforcement()
	if e.Level != Full {
		return "WARNING: TOOLS RUN " + strings.ToUpper(e.Level.String()) + ": " + e.String()
	}
	return e.String() + ", profile " + p.File + "; " + HostProtection().String()
}
