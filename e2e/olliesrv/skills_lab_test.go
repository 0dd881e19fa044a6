package olliesrv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/sshlab"
)

// Two real hosts (OpenSSH sshd, each its own user) given the same skills
// and the same binary, one with an extra directory on PATH holding a
// binary the other lacks: each olliesrv, started over ssh, offers the
// skills whose conditions hold on its host and says why of the others.
func TestSkillsOnTwoLabHosts(t *testing.T) {
	srv, _ := binaries(t)
	// Everything the hosts' users run and read, in a directory they can
	// reach (the test's temporary directories are root's alone).
	root, err := os.MkdirTemp("", "ollie-skills-lab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	probe := filepath.Join(root, "probe")
	bin, data := filepath.Join(root, "bin"), filepath.Join(root, "data")
	for _, d := range []string{probe, bin, filepath.Join(data, "skills")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(root, 0o755)
	os.WriteFile(filepath.Join(probe, "ollie-lab-probe"), []byte("#!/bin/sh\n"), 0o755)
	if out, err := exec.Command("cp", srv, filepath.Join(bin, "olliesrv")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	os.Symlink("olliesrv", filepath.Join(bin, "ollie"))
	if out, err := exec.Command("cp", "-r", "../../data/skills/.", filepath.Join(data, "skills")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	os.WriteFile(filepath.Join(data, "skills", "lab-probe.md"),
		[]byte("---\nname: lab-probe\ndescription: Only where ollie-lab-probe is.\nwhen:\n  binary: ollie-lab-probe\n---\nThe probe.\n"), 0o644)

	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "olskl", ExtraPath: map[int][]string{1: {probe}}})
	skillsOn := func(h *sshlab.Host) map[string]string {
		t.Helper()
		t.Cleanup(func() { lab.SSH(h.Name, bin+"/olliesrv", "stop").Run() })
		out, err := lab.SSH(h.Name, "env", "OLLIE_DATA="+data, bin+"/ollie", "-start", "read", "skills").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: ollie -start read skills: %v\n%s", h.Name, err, out)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "\t")
			if len(f) != 4 {
				t.Fatalf("%s: a line of /skills is not name, state, why, description: %q", h.Name, line)
			}
			got[f[0]] = f[1] + ": " + f[2]
		}
		return got
	}
	plain, probed := skillsOn(lab.Host(0)), skillsOn(lab.Host(1))
	if got := plain["lab-probe"]; got != `skipped: binary "ollie-lab-probe" not found in PATH` {
		t.Errorf("%s: lab-probe %q", lab.Host(0).Name, got)
	}
	if got, want := probed["lab-probe"], `offered: binary "ollie-lab-probe" found at `+probe+"/ollie-lab-probe"; got != want {
		t.Errorf("%s: lab-probe %q, want %q", lab.Host(1).Name, got, want)
	}
	for _, skills := range []map[string]string{plain, probed} {
		if got := skills["ollie-namespace"]; got != "offered: no conditions" {
			t.Errorf("ollie-namespace %q", got)
		}
		if len(skills) != 4 {
			t.Errorf("skills %q, want the three starters and lab-probe", skills)
		}
	}
}
