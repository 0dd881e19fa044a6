package olliesrv

// What the engine costs: the same goal on the same lab hosts through the
// ollie.fleet collection (ansible-playbook, forks = hosts) and through
// ollie-remote fleet run, both from cold (no SSH connection held). The
// figures and their reading are in docs/benchmarks.md.
//
//	OLLIE_LAB=1 go test ./e2e/olliesrv -run '^$' -bench AnsibleVsFleetRun -benchtime 1x -v
//
// OLLIE_BENCH_HOSTS sets how many hosts (default 4, at most 9).

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/lab"
	"ollie/internal/sshlab"
)

func BenchmarkAnsibleVsFleetRun(b *testing.B) {
	lab.Root(b, "real sshd hosts")
	for _, tool := range []string{"ansible-playbook", "ansible-galaxy"} {
		_, err := exec.LookPath(tool)
		lab.Need(b, err == nil, tool+" (Debian's ansible-core)")
	}
	n := 4
	if v, err := strconv.Atoi(os.Getenv("OLLIE_BENCH_HOSTS")); err == nil && v > 0 {
		n = min(v, sshlab.MaxHosts)
	}
	l := sshlab.Start(b, sshlab.Config{Hosts: n, UserPrefix: "oansb"})
	srv, _ := binaries(b)
	ctl, err := os.MkdirTemp("/run", "ollie-ansible-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(ctl) })
	remoteDir := filepath.Join(ctl, "bin")
	remoteBin := filepath.Join(remoteDir, "ollie-remote")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", remoteBin, "../../cmd/ollie-remote")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ollie-remote: %v\n%s", err, out)
	}
	data := ansibleData(b, filepath.Join(ctl, "data"))
	colls := installCollection(b, ctl)

	var inv strings.Builder
	inv.WriteString("all:\n  hosts:\n")
	var names []string
	for _, h := range l.Hosts {
		llm := fakellm.Start(b)
		llm.Respond(func(*fakellm.ChatRequest) fakellm.Response { return fakellm.Text("checked") })
		fmt.Fprintf(&inv, "    %s:\n      ollie_backends: {\"backends\": {\"fake\": {\"type\": \"openai\", \"url\": %q, \"model\": \"fake-model\"}}}\n", h.Name, llm.URL+"/v1")
		resetHome(b, l, h)
		b.Cleanup(func() { l.SSH(h.Name, ".local/share/ollie/current/olliesrv stop").Run() })
		names = append(names, h.Name)
	}
	fmt.Fprintf(&inv, "  vars:\n    ansible_ssh_common_args: -F %s\n    ansible_python_interpreter: /usr/bin/python3\n", l.ConfigFile)
	os.WriteFile(filepath.Join(ctl, "inventory.yml"), []byte(inv.String()), 0600)
	os.WriteFile(filepath.Join(ctl, "deploy.yml"), []byte(fmt.Sprintf(`- hosts: all
  gather_facts: false
  roles:
    - role: ollie.fleet.deploy
      vars: {ollie_bin: %s, ollie_data: %s}
`, srv, data)), 0600)
	// One task: the results come back in ansible-playbook -v's output,
	// not through a task of their own.
	os.WriteFile(filepath.Join(ctl, "goal.yml"), []byte(`- hosts: all
  gather_facts: false
  tasks:
    - ollie.fleet.ollie_goal: {goal: check where you are, run_id: "{{ run_id }}", timeout: 120}
`), 0600)
	play := func(cp string, args ...string) ([]byte, time.Duration, error) {
		args = append([]string{"-i", filepath.Join(ctl, "inventory.yml"), "--forks", strconv.Itoa(n)}, args...)
		cmd := exec.Command("ansible-playbook", args...)
		cmd.Env = append(os.Environ(), "ANSIBLE_COLLECTIONS_PATH="+colls, "ANSIBLE_NOCOLOR=1",
			"ANSIBLE_SSH_CONTROL_PATH_DIR="+cp, "ANSIBLE_LOCAL_TEMP="+filepath.Join(ctl, "tmp"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			return nil, 0, fmt.Errorf("%v\n%s%s", err, out, stderr.String())
		}
		return out, time.Since(start), nil
	}
	if _, _, err := play(filepath.Join(ctl, "cp-deploy"), filepath.Join(ctl, "deploy.yml")); err != nil {
		b.Fatalf("deploy: %v", err)
	}

	var ansibleTotal, fleetTotal time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// The collection, from cold: a control path directory of its own.
		id := fmt.Sprintf("bench-%d-%d", i, time.Now().UnixNano())
		out, took, err := play(filepath.Join(ctl, "cp-"+id), "-v", "-e", "run_id="+id, filepath.Join(ctl, "goal.yml"))
		if err != nil {
			b.Fatalf("the goal play: %v", err)
		}
		got := map[string]struct{ Status, Answer string }{}
		for _, m := range ansibleResult.FindAllSubmatch(out, -1) {
			var r struct{ Status, Answer string }
			json.Unmarshal(m[2], &r)
			got[string(m[1])] = r
		}
		for _, h := range names {
			if r := got[h]; r.Status != "done" || r.Answer != "checked" {
				b.Fatalf("%s's result through the collection: %+v\n%s", h, r, out)
			}
		}
		ansibleTotal += took

		// fleet run, from cold: a fresh ollie-remote directory, so a
		// keeper of its own that holds nothing yet.
		rdir := filepath.Join(ctl, "remote-"+id)
		os.MkdirAll(rdir, 0700)
		cmd := exec.Command(remoteBin, "-F", l.ConfigFile, "-bin", filepath.Dir(srv), "-data", data,
			"fleet", "run", "-json", "-j", strconv.Itoa(n), strings.Join(names, ","), "check where you are")
		cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+rdir, "SSH_AUTH_SOCK=", "XDG_STATE_HOME="+filepath.Join(rdir, "state"))
		start := time.Now()
		out, err = cmd.CombinedOutput()
		took = time.Since(start)
		down := exec.Command(remoteBin, "-F", l.ConfigFile, "down", "-all")
		down.Env = cmd.Env
		down.Run()
		if err != nil {
			b.Fatalf("fleet run: %v\n%s", err, out)
		}
		if c := strings.Count(string(out), `"result":"done"`); c != n {
			b.Fatalf("fleet run: %d of %d hosts done\n%s", c, n, out)
		}
		fleetTotal += took
	}
	b.StopTimer()
	b.ReportMetric(ansibleTotal.Seconds()/float64(b.N), "s/collection")
	b.ReportMetric(fleetTotal.Seconds()/float64(b.N), "s/fleet-run")
	b.Logf("%d hosts: the collection %.2fs, fleet run %.2fs (per run)", n, ansibleTotal.Seconds()/float64(b.N), fleetTotal.Seconds()/float64(b.N))
}

// ansibleResult is a task's result in ansible-playbook -v's output.
var ansibleResult = regexp.MustCompile(`(?m)^changed: \[(h1\d)\] => (\{.*\})$`)
