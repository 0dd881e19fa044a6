package inventory

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Options says where hosts come from.
type Options struct {
	// Inventory is an Ansible inventory: a file, or a directory of them
	// (ansible -i). "" means none: names, ssh config patterns and files
	// of names only.
	Inventory string
	// SSHConfig is the ssh config file whose Host names patterns match.
	// "" reads ~/.ssh/config, then /etc/ssh/ssh_config, as tunnel does;
	// give the same file as tunnel.Options.ConfigFile.
	SSHConfig string
	// AnsibleInventory is the ansible-inventory program that lists the
	// inventory. "" looks for it on PATH and reads the inventory itself
	// when there is none; NoAnsible always reads it itself.
	AnsibleInventory string
}

// NoAnsible, as Options.AnsibleInventory, reads static inventories here,
// even where ansible-inventory is installed.
const NoAnsible = "none"

// SourceSSHConfig is Resolve's source when no inventory is given.
const SourceSSHConfig = "ssh config"

// Resolve turns targets, the words a user typed (each may hold several,
// separated by commas or spaces), into hosts, in the order given and
// each once:
//
//   - a name: web1, deploy@web1:2222, 10.0.0.5 — taken as it is;
//   - a pattern with * ? or [...]: web*, db[12] — the literal Host names
//     of the ssh config files and the inventory's hosts that match it;
//   - @NAME: with an inventory, the group NAME and its children's
//     groups, recursively; else, or when the inventory has no such group,
//     the file NAME (relative to the working directory): one name or
//     pattern per line, # comments.
//
// A pattern that matches nothing, an empty group and an unknown group or
// file are errors naming it (*TargetError). A host the inventory knows
// gets its vars as an Override and its groups. source says what was read:
// "ansible-inventory -i FILE --list (ansible-core 2.14.18)", "static INI
// inventory FILE", "static YAML inventory FILE", "static inventory
// directory DIR", or SourceSSHConfig without an inventory.
//
// With an inventory, ansible-inventory is run when it is installed (see
// Options.AnsibleInventory) so that dynamic inventories work as they do
// for Ansible; ctx bounds it.
func Resolve(ctx context.Context, targets []string, o Options) (hosts []Host, source string, err error) {
	var words []string
	for _, t := range targets {
		words = append(words, splitTargets(t)...)
	}
	if len(words) == 0 {
		return nil, "", &TargetError{Target: strings.Join(targets, " "), Msg: "no hosts given", Err: ErrNoTargets}
	}
	r := &resolver{o: o, seen: map[string]bool{}, files: map[string]bool{}}
	source = SourceSSHConfig
	if o.Inventory != "" {
		if r.inv, err = load(ctx, o); err != nil {
			return nil, "", err
		}
		source = r.inv.source
	}
	for _, w := range words {
		if err := r.add(w); err != nil {
			return nil, source, err
		}
	}
	for _, name := range r.names {
		// An inventory's names are the user's, but a dynamic one takes
		// them from a cloud's tags: no option or escape gets through.
		if !plainWord(name) {
			msg := "not a host name"
			if r.inv != nil {
				msg += " (in inventory " + r.inv.name + ")"
			}
			return nil, source, &TargetError{Target: fmt.Sprintf("%q", name), Msg: msg}
		}
		h := Host{Name: name}
		if r.inv != nil {
			if base := hostOf(name); r.inv.hasHost(base) {
				if h.Override, err = override(base, r.inv.vars[base]); err != nil {
					return nil, source, err
				}
				h.Groups = r.inv.groupNames(base)
				h.Vars = ollieVars(r.inv.vars[base])
			}
		}
		hosts = append(hosts, h)
	}
	return hosts, source, nil
}

// load reads the inventory, through ansible-inventory where there is one.
func load(ctx context.Context, o Options) (*inventory, error) {
	if _, err := os.Stat(o.Inventory); err != nil {
		return nil, &SyntaxError{File: o.Inventory, Msg: "cannot read the inventory: " + errText(err)}
	}
	switch bin := o.AnsibleInventory; bin {
	case NoAnsible:
	case "":
		if p, err := exec.LookPath("ansible-inventory"); err == nil {
			return readAnsible(ctx, p, o.Inventory)
		}
	default:
		return readAnsible(ctx, bin, o.Inventory)
	}
	return readStatic(o.Inventory)
}

func splitTargets(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
}

type resolver struct {
	o        Options
	inv      *inventory
	names    []string
	seen     map[string]bool
	files    map[string]bool // files of names being read, against loops
	sshHosts []string
	sshRead  bool
}

func (r *resolver) push(names ...string) {
	for _, n := range names {
		if !r.seen[n] {
			r.seen[n] = true
			r.names = append(r.names, n)
		}
	}
}

func (r *resolver) add(w string) error {
	if name, ok := strings.CutPrefix(w, "@"); ok {
		return r.addAt(w, name)
	}
	userAt, host := splitUser(w)
	if !isPattern(host) {
		if !plainWord(w) || host == "" {
			return &TargetError{Target: w, Msg: "not a host name"}
		}
		r.push(w)
		return nil
	}
	glob := strings.ReplaceAll(host, "[!", "[^")
	if _, err := path.Match(glob, ""); err != nil {
		return &TargetError{Target: w, Msg: "not a valid pattern", Err: err}
	}
	var cands []string
	if r.inv != nil {
		cands = r.inv.allHosts()
	}
	ssh, err := r.sshConfigHosts()
	if err != nil {
		return err
	}
	cands = append(cands, ssh...)
	matched := false
	for _, c := range cands {
		if ok, _ := path.Match(glob, c); ok && plainWord(c) {
			matched = true
			r.push(userAt + c)
		}
	}
	if !matched {
		where := "the Host names of ssh config " + strings.Join(r.sshFiles(), ", ")
		if r.inv != nil {
			where = "the hosts of inventory " + r.inv.name + " and " + where
		}
		return &TargetError{Target: w, Msg: "matches none of " + where, Err: ErrNoMatch}
	}
	return nil
}

// addAt adds @name: the inventory's group of that name, else a file.
func (r *resolver) addAt(w, name string) error {
	if name == "" {
		return &TargetError{Target: w, Msg: "names no group or file"}
	}
	if r.inv != nil && r.inv.hasGroup(name) {
		hosts := r.inv.groupHosts(name)
		if len(hosts) == 0 {
			return &TargetError{Target: w, Msg: fmt.Sprintf("group %s of inventory %s has no hosts", name, r.inv.name), Err: ErrEmptyGroup}
		}
		r.push(hosts...)
		return nil
	}
	st, err := os.Stat(name)
	if err != nil || st.IsDir() {
		msg := fmt.Sprintf("no file %s", name)
		if r.inv != nil {
			msg = fmt.Sprintf("no group %s in inventory %s, and no file %s", name, r.inv.name, name)
		} else {
			msg += " (groups come from an inventory: give one)"
		}
		return &TargetError{Target: w, Msg: msg, Err: ErrUnknownGroup}
	}
	return r.addFile(w, name)
}

// addFile adds the names and patterns of a file, one or more a line.
func (r *resolver) addFile(w, name string) error {
	abs, err := filepath.Abs(name)
	if err != nil {
		abs = name
	}
	if r.files[abs] {
		return &TargetError{Target: w, Msg: fmt.Sprintf("file %s includes itself", name)}
	}
	r.files[abs] = true
	defer delete(r.files, abs)
	f, err := os.Open(name)
	if err != nil {
		return &TargetError{Target: w, Msg: errText(err), Err: err}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		for _, word := range splitTargets(text) {
			if err := r.add(word); err != nil {
				var te *TargetError
				if errors.As(err, &te) {
					te.Msg += fmt.Sprintf(" (%s:%d)", name, line)
				}
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return &SyntaxError{File: name, Line: line + 1, Msg: err.Error()}
	}
	return nil
}

func (r *resolver) sshFiles() []string { return sshConfigFiles(r.o.SSHConfig) }

func (r *resolver) sshConfigHosts() ([]string, error) {
	if !r.sshRead {
		hosts, err := sshConfigHosts(r.o.SSHConfig)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("inventory: ssh config %s: %w", pe.Path, pe.Err)
			}
			return nil, err
		}
		r.sshHosts, r.sshRead = hosts, true
	}
	return r.sshHosts, nil
}

// splitUser takes a leading user@ off a target.
func splitUser(w string) (userAt, rest string) {
	if i := strings.LastIndexByte(w, '@'); i >= 0 {
		return w[:i+1], w[i+1:]
	}
	return "", w
}

// isPattern is a target that is a glob: with * or ?, or with brackets
// that are not an IPv6 address's ([::1]:22).
func isPattern(host string) bool {
	if strings.ContainsAny(host, "*?") {
		return true
	}
	if !strings.Contains(host, "[") {
		return false
	}
	if h, _, err := net.SplitHostPort(host); err == nil && net.ParseIP(h) != nil {
		return false
	}
	return !(strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") && net.ParseIP(host[1:len(host)-1]) != nil)
}

// hostOf is the host of a name without its user@ and :port, as the
// inventory knows it.
func hostOf(name string) string {
	_, h := splitUser(name)
	if host, port, err := net.SplitHostPort(h); err == nil && allDigits(port) {
		return host
	}
	return h
}
