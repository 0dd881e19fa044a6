package olliesrv

// contrib/docker/Dockerfile is not built here (no container runtime runs
// in the tests): this checks the recipe against the real binary instead.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"ollie/agent/fakellm"
	"ollie/internal/lab"
)

// dockerfile is a Dockerfile's instructions: each keyword (upper case)
// with the arguments of every instruction of that keyword, in order, its
// continuation lines joined.
func dockerfile(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ins := map[string][]string{}
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		kw, args, _ := strings.Cut(cur.String(), " ")
		ins[strings.ToUpper(kw)] = append(ins[strings.ToUpper(kw)], strings.TrimSpace(args))
		cur.Reset()
	}
	return ins
}

// TestDockerfile reads contrib/docker/Dockerfile and runs what the image
// would: its ENTRYPOINT, with the real binary at the path the image puts
// it, its data beside it, as a non-root user whose home (the volume) is
// fresh. A key added as the recipe's README says gets in with OpenSSH;
// ssh-fingerprint names the key the client saw; an agent is made (its
// profile found in the data beside the binary); the STOPSIGNAL stops the
// daemon with status 0. The port is the listener's own choice (":0" for
// ":2222") and the namespace directory a temporary one, so that the test
// runs beside other daemons.
func TestDockerfile(t *testing.T) {
	_, err := exec.LookPath("ssh")
	lab.Need(t, err == nil, "the OpenSSH client (ssh)")
	df := dockerfile(t, "../../contrib/docker/Dockerfile")
	r := readRecipe(t, df)
	img := layImage(t, r)
	h, cmd := img.h, img.cmd

	argv := append([]string{filepath.Join(img.root, r.entry[0])}, r.entry[1:]...)
	argv[r.addrAt] = strings.Split(r.entry[r.addrAt], ":")[0] + ":0"
	h.cmd = cmd(argv...)
	h.start()

	// A key, added as the README says, lets its holder in.
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", h.Key).CombinedOutput(); err != nil {
		lab.Need(t, false, fmt.Sprintf("ssh-keygen (openssh-client): %v %s", err, out))
	}
	add := cmd("sh", "-c", "cat >> ~/.config/ollie/authorized_keys")
	pub, _ := os.Open(h.Key + ".pub")
	defer pub.Close()
	add.Stdin = pub
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("adding the key: %v %s", err, out)
	}
	if out := h.must("", "ollie", "ls", "/"); !strings.Contains(out, "session/") {
		t.Errorf("ssh ollie ls /: %q", out)
	}
	fp, err := cmd(filepath.Join(img.img, "bin", "olliesrv"), "ssh-fingerprint").Output()
	kh, _ := os.ReadFile(h.KnownHosts)
	_, _, seen, _, _, perr := ssh.ParseKnownHosts(kh)
	if err != nil || perr != nil || len(strings.Fields(string(fp))) < 2 || strings.Fields(string(fp))[1] != ssh.FingerprintSHA256(seen) {
		t.Errorf("olliesrv ssh-fingerprint %q (%v), the client saw %q (%v)", fp, err, kh, perr)
	}
	h.must("name=box\n", "rdwr", "session/new")
	h.must("name=a backend=openai\n", "rdwr", "session/box/agent/new")
	h.waitState("session/box/agent/a", "idle")

	sig := syscall.SIGTERM
	if len(df["STOPSIGNAL"]) == 1 && df["STOPSIGNAL"][0] != "SIGTERM" {
		t.Fatalf("STOPSIGNAL %q: olliesrv shuts down on SIGTERM", df["STOPSIGNAL"])
	}
	h.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the entrypoint after %v: %v\n%s", sig, err, h.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the entrypoint did not stop on %v\n%s", sig, h.log.String())
	}
	if _, err := os.Stat(filepath.Join(img.vol, ".local", "state", "ollie", "ssh_host_ed25519_key")); err != nil {
		t.Errorf("the host key is not in the volume: %v", err)
	}
}

// recipe is what TestDockerfile takes from the Dockerfile: the ENTRYPOINT
// (entry[addrAt] is the listener's address), the user's home (the
// volume) and where the runtime stage puts the build's output.
type recipe struct {
	entry        []string
	addrAt       int
	home, prefix string
}

// readRecipe checks the Dockerfile's instructions against each other.
func readRecipe(t *testing.T, df map[string][]string) recipe {
	t.Helper()
	var r recipe
	if len(df["ENTRYPOINT"]) != 1 || json.Unmarshal([]byte(df["ENTRYPOINT"][0]), &r.entry) != nil || len(r.entry) < 2 {
		t.Fatalf("ENTRYPOINT %q: want one, in exec (JSON) form", df["ENTRYPOINT"])
	}
	entry := r.entry
	if filepath.Base(entry[0]) != "olliesrv" || !filepath.IsAbs(entry[0]) || entry[1] != "serve" {
		t.Errorf("ENTRYPOINT %q: want olliesrv serve, by its absolute path", entry)
	}
	r.addrAt = -1
	for i := range entry[:len(entry)-1] {
		if entry[i] == "-ssh" {
			r.addrAt = i + 1
		}
	}
	if r.addrAt < 0 {
		t.Fatalf("ENTRYPOINT %q runs no listener (-ssh ADDR)", entry)
	}
	if _, port, _ := strings.Cut(entry[r.addrAt], ":"); len(df["EXPOSE"]) != 1 || df["EXPOSE"][0] != port {
		t.Errorf("EXPOSE %q, the listener's port %q", df["EXPOSE"], port)
	}
	if len(df["USER"]) != 1 || df["USER"][0] == "root" || df["USER"][0] == "0" {
		t.Errorf("USER %q: want one user, not root", df["USER"])
	}
	r.home = "/home/" + df["USER"][0]
	if strings.Join(df["VOLUME"], " ") != r.home {
		t.Errorf("VOLUME %q: want the user's home %s, where the state is", df["VOLUME"], r.home)
	}
	// The build makes bin/olliesrv static and puts data beside bin, where
	// the binary looks for it; the runtime stage copies both to where the
	// ENTRYPOINT runs it from.
	run := strings.Join(df["RUN"], "\n")
	build := regexp.MustCompile(`CGO_ENABLED=0 go build .*-o (\S+)/bin/olliesrv \./cmd/olliesrv`).FindStringSubmatch(run)
	if build == nil || !strings.Contains(run, "cp -r data "+build[1]+"/data") {
		t.Fatalf("the build stage makes no static OUT/bin/olliesrv of ./cmd/olliesrv with data in OUT/data:\n%s", run)
	}
	copied := regexp.MustCompile(`^--from=\S+ ` + regexp.QuoteMeta(build[1]) + `/? (\S+?)/?$`)
	for _, c := range df["COPY"] {
		if m := copied.FindStringSubmatch(c); m != nil {
			r.prefix = m[1]
		}
	}
	if r.prefix == "" || entry[0] != r.prefix+"/bin/olliesrv" {
		t.Fatalf("COPY %q puts %s/bin/olliesrv at %q, the ENTRYPOINT runs %q", df["COPY"], build[1], r.prefix, entry[0])
	}
	return r
}

// image is the image's layout in a temporary root: img is where the build's
// output is, vol the user's home; cmd runs a command there as the image
// would, as its user.
type image struct {
	root, img, vol string
	h              *listenerHost
	cmd            func(argv ...string) *exec.Cmd
}

// layImage lays the image out in a temporary root: the real binary and
// the data where the recipe puts them, and a fresh volume.
func layImage(t *testing.T, r recipe) *image {
	t.Helper()
	srv, _ := binaries(t)
	root, err := os.MkdirTemp("", "ollie-docker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0755)
	img := filepath.Join(root, r.prefix)
	os.MkdirAll(filepath.Join(img, "bin"), 0755)
	if out, err := exec.Command("cp", srv, filepath.Join(img, "bin", "olliesrv")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	data, _ := filepath.Abs("../../data")
	if out, err := exec.Command("cp", "-r", data, filepath.Join(img, "data")).CombinedOutput(); err != nil {
		t.Fatalf("cp -r data: %v %s", err, out)
	}
	exec.Command("chmod", "-R", "a+rX", img).Run()
	h := &listenerHost{tb: t, Dir: filepath.Join(root, "ns"), log: &lockedBuilder{},
		KnownHosts: filepath.Join(root, "known_hosts"), SSHConfig: filepath.Join(root, "ssh_config"), Key: filepath.Join(root, "id_ed25519")}
	vol := filepath.Join(root, r.home)
	os.MkdirAll(filepath.Dir(vol), 0755)
	for _, d := range []string{h.Dir, vol, filepath.Join(vol, ".config", "ollie")} {
		os.MkdirAll(d, 0700)
	}
	// As the image's user where the test may: not root, as the image runs.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 10001, Gid: 10001}
		exec.Command("chown", "-R", "10001:10001", h.Dir, vol).Run()
	}
	llm := fakellm.Start(t)
	env := append([]string{"HOME=" + vol, "PATH=" + filepath.Join(img, "bin") + ":/usr/bin:/bin", "NAMESPACE=" + h.Dir}, agentEnv(llm)...)
	cmd := func(argv ...string) *exec.Cmd {
		c := exec.Command(argv[0], argv[1:]...)
		c.Env, c.Dir = env, vol
		if cred != nil {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return c
	}
	return &image{root: root, img: img, vol: vol, h: h, cmd: cmd}
}
