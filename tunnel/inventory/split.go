package inventory

import (
	"context"
	"path"
	"strings"
)

// SplitTargets splits the words of a command line that gives its targets
// and then its goal (fleet run TARGETS GOAL) without -H: the first word is
// a target, and so is each following word that names hosts this desktop
// knows by name (a Host name of the ssh config files or of the inventory,
// one of held, a pattern matching some, an @GROUP or @FILE, or a list with
// commas), up to the last word, which is always the goal's. So
// "h1 h2 h3 'check disks'" runs on three hosts, and a goal is never cut
// short to nothing; "h1 check the disks" runs on h1.
func SplitTargets(ctx context.Context, words []string, o Options, held []string) (targets, goal []string) {
	if len(words) == 0 {
		return nil, nil
	}
	known := map[string]bool{}
	for _, h := range held {
		known[h] = true
	}
	if names, err := sshConfigHosts(o.SSHConfig); err == nil {
		for _, n := range names {
			known[n] = true
		}
	}
	if o.Inventory != "" {
		if inv, err := load(ctx, o); err == nil {
			for _, n := range inv.allHosts() {
				known[n] = true
			}
		}
	}
	names := func(w string) bool {
		switch {
		case w == "" || strings.ContainsAny(w, " \t\n"):
			return false // words of a sentence, quoted
		case strings.HasPrefix(w, "@") || strings.Contains(w, ","):
			return true
		}
		_, host := splitUser(w)
		if !isPattern(host) {
			return known[host]
		}
		glob := strings.ReplaceAll(host, "[!", "[^")
		for n := range known {
			if ok, _ := path.Match(glob, n); ok {
				return true
			}
		}
		return false
	}
	i := 1
	for i < len(words)-1 && names(words[i]) {
		i++
	}
	return words[:i], words[i:]
}
