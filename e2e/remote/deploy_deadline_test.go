package remote

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/internal/sshlab"
)

// plantOlliesrv installs script as the olliesrv the probe runs on h, as a
// compromised host would have it.
func plantOlliesrv(t *testing.T, h *sshlab.Host, script string) {
	t.Helper()
	dir := filepath.Join(h.Home, ".local/share/ollie/current")
	if err := os.MkdirAll(dir, 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "olliesrv"), []byte("#!/bin/sh\n"+script+"\n"), 0755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".local", ".local/share", ".local/share/ollie", ".local/share/ollie/current", ".local/share/ollie/current/olliesrv"} {
		os.Lchown(filepath.Join(h.Home, p), h.UID, h.GID)
	}
	t.Cleanup(func() { exec.Command("pkill", "-KILL", "-u", h.User).Run() })
}

// TestDeployDeadline: a host whose probe never answers fails with "timed
// out" after the step's deadline, and the honest host beside it is
// deployed and reported; a probe that floods its output is stopped at the
// cap. Before, deploy h4 h5 hung for good, and 1.5 GiB of probe output
// took the desktop to 6.9 GB.
func TestDeployDeadline(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "ordl"})
	r := newRemote(t, lab)
	h4, h5 := lab.Host(0), lab.Host(1)
	plantOlliesrv(t, h4, "exec sleep 3600")

	t0 := time.Now()
	out, err := r.run("-timeout", "3s", "deploy", h4.Name, h5.Name)
	took := time.Since(t0)
	if err == nil {
		t.Errorf("deploy succeeded with a hung host:\n%s", out)
	}
	if row := tableRow(out, h5.Name); len(row) == 0 || row[len(row)-1] != "ok" {
		t.Errorf("the honest host's row %q:\n%s", row, out)
	}
	if row := tableRow(out, h4.Name); len(row) == 0 || row[len(row)-1] != "FAILED" {
		t.Errorf("the hung host's row %q:\n%s", row, out)
	}
	if !strings.Contains(out, h4.Name+": FAILED: probing the host: timed out after 3s") {
		t.Errorf("no time-out named for %s:\n%s", h4.Name, out)
	}
	// The bound is the point, and generous: the message above shows the
	// deadline fired; this catches a deploy that then waited on for the
	// hung probe, which sleeps for an hour.
	if took > 40*time.Second {
		t.Errorf("deploy took %v with a 3s step deadline", took)
	}

	// cat /dev/zero never ends: the message says deploy stopped it at the
	// cap.
	plantOlliesrv(t, h4, "exec cat /dev/zero")
	out, err = r.run("deploy", h4.Name)
	if err == nil || !strings.Contains(out, h4.Name+": FAILED: probing the host: the host sent more than 1.0 MiB of output; stopped") {
		t.Errorf("flooding probe: %v\n%s", err, out)
	}
}
