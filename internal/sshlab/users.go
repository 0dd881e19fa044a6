package sshlab

// The lab's system users: made or reused, their shells, sudo rules and
// passwords, shared between labs.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// userMu serialises user changes between labs of one process; useradd's
// own lock covers other processes.
var userMu sync.Mutex

// defaultShell is a lab user's login shell unless Config.Shell says.
const defaultShell = "/bin/bash"

// shell is the login shell of the i'th host's user.
func (l *Lab) shell(i int) string {
	if s := l.cfg.Shell[i]; s != "" {
		return s
	}
	return defaultShell
}

func (l *Lab) user(h *Host, shell string) error {
	userMu.Lock()
	defer userMu.Unlock()
	if _, _, _, err := lookupUser(h.User); err != nil {
		out, err := exec.Command("useradd", "-m", "-s", shell, h.User).CombinedOutput()
		// Another test process may have made it in the meantime.
		if err != nil {
			if _, _, _, err2 := lookupUser(h.User); err2 != nil {
				return fmt.Errorf("useradd %s: %v: %s", h.User, err, out)
			}
		}
	}
	if err := setShell(h.User, shell); err != nil {
		return err
	}
	var err error
	if h.Home, h.UID, h.GID, err = lookupUser(h.User); err != nil {
		return err
	}
	if err := os.MkdirAll(h.Home, 0o755); err != nil {
		return err
	}
	if err := os.Chown(h.Home, h.UID, h.GID); err != nil {
		return err
	}
	if l.cfg.Password != "" {
		cmd := exec.Command("chpasswd")
		cmd.Stdin = strings.NewReader(h.User + ":" + l.cfg.Password + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("chpasswd %s: %v: %s", h.User, err, out)
		}
	} else if locked(h.User) {
		if out, err := exec.Command("usermod", "-p", "*", h.User).CombinedOutput(); err != nil {
			return fmt.Errorf("usermod %s: %v: %s", h.User, err, out)
		}
	}
	ak := filepath.Join(l.Dir, "authorized_keys", h.User)
	if err := os.WriteFile(ak, []byte(l.ClientPub+"\n"), 0o644); err != nil {
		return err
	}
	if l.cfg.Sudoers {
		rule := h.User + " ALL=(ALL:ALL) ALL\n"
		if l.cfg.SudoNopasswd {
			rule = h.User + " ALL=(ALL:ALL) NOPASSWD: ALL\n"
		}
		f := sudoersFile(h.User)
		if err := os.WriteFile(f, []byte(rule), 0o440); err != nil {
			return err
		}
		if out, err := exec.Command("visudo", "-cf", f).CombinedOutput(); err != nil {
			os.Remove(f)
			return fmt.Errorf("visudo %s: %v: %s", f, err, out)
		}
	}
	return nil
}

func sudoersFile(user string) string { return "/etc/sudoers.d/ollie-sshlab-" + user }

// setShell makes shell the user's login shell, unless it is already.
func setShell(user, shell string) error {
	if s, err := userShell(user); err == nil && s == shell {
		return nil
	}
	if out, err := exec.Command("usermod", "-s", shell, user).CombinedOutput(); err != nil {
		return fmt.Errorf("usermod -s %s %s: %v: %s", shell, user, err, out)
	}
	return nil
}

// userShell is the user's login shell in /etc/passwd.
func userShell(name string) (string, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) >= 7 && f[0] == name {
			return f[6], nil
		}
	}
	return "", fmt.Errorf("no user %s", name)
}

func lookupUser(name string) (home string, uid, gid int, err error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "", 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 7 && f[0] == name {
			uid, _ := strconv.Atoi(f[2])
			gid, _ := strconv.Atoi(f[3])
			return f[5], uid, gid, nil
		}
	}
	return "", 0, 0, fmt.Errorf("no user %s", name)
}

// locked reports whether the user's password field starts with "!", which
// sshd without PAM takes for a locked account and refuses even key logins.
func locked(name string) bool {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 2 && f[0] == name {
			return strings.HasPrefix(f[1], "!")
		}
	}
	return false
}
