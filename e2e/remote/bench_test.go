package remote

// The benchmarks of issue #5. Each times ollie-remote beside the tool one
// would use instead, on the same sshlab hosts, interleaved iteration by
// iteration (in an order that rotates, so that neither always goes first),
// and reports both and their ratio. Nothing here asserts a speed: the
// figures and their reading are in docs/benchmarks.md.
//
//	go test ./e2e/remote -run '^$' -bench . -benchtime 5s -count 3
//
// They need root, sshd, rsync and parallel-scp (pssh), and fail without
// them: a benchmark that skips would report nothing and look fine.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/sshlab"
	"ollie/ns/client"
	"ollie/tunnel"
	"ollie/tunnel/resume"
)

// deployBench is a lab of nine hosts (sshlab.MaxHosts) and what deploys to
// them: ollie-remote, nine parallel rsyncs and parallel-scp, all copying the same files.
type deployBench struct {
	lab       *sshlab.Lab
	hosts     []string
	dir       string // OLLIE_REMOTE_DIR
	src       string // olliesrv and data/, as rsync and scp copy them
	hostsFile string // parallel-scp's
	binSize   int64
	cache     string // XDG_CACHE_HOME for deploy; "": the user's
}

func BenchmarkDeploy(b *testing.B) {
	if buildFailed != nil {
		b.Fatal(buildFailed)
	}
	for _, tool := range []string{"rsync", "parallel-scp"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s not found: apt-get install rsync pssh", tool)
		}
	}
	lab := sshlab.Start(b, sshlab.Config{Hosts: sshlab.MaxHosts, UserPrefix: "orbench"})
	e := &deployBench{lab: lab}
	for _, h := range lab.Hosts {
		e.hosts = append(e.hosts, h.Name)
	}
	// Short: the keeper's sockets live in it.
	dir, err := os.MkdirTemp("", "orb")
	if err != nil {
		b.Fatal(err)
	}
	e.dir = dir
	e.src = filepath.Join(b.TempDir(), "src")
	os.MkdirAll(e.src, 0755)
	for _, cp := range [][]string{{filepath.Join(binDir, "olliesrv"), e.src}, {dataDir, filepath.Join(e.src, "data")}} {
		if out, err := exec.Command("cp", "-a", cp[0], cp[1]).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v\n%s", err, out)
		}
	}
	fi, err := os.Stat(filepath.Join(e.src, "olliesrv"))
	if err != nil {
		b.Fatal(err)
	}
	e.binSize = fi.Size()
	e.hostsFile = filepath.Join(b.TempDir(), "hosts")
	os.WriteFile(e.hostsFile, []byte(strings.Join(e.hosts, "\n")+"\n"), 0644)
	b.Cleanup(func() {
		e.remote("down", "-all", "-stop-daemon")
		e.reset(b)
		for _, h := range lab.Hosts {
			os.RemoveAll(filepath.Join(h.Home, "bench-pscp"))
		}
		os.RemoveAll(dir)
	})
	e.reset(b)

	// Cold: nothing of ollie on the hosts, no daemon, and the rsync and
	// scp destinations gone. deploy runs twice in the loop, on fresh
	// hosts each time: with this desktop's cache as earlier deploys left
	// it, and with an empty one, as the first deploy of a new build finds
	// it (whatever deploy compresses it makes then: new-build-s/op).
	b.Run("cold", func(b *testing.B) {
		var td, tn, tr, tp time.Duration
		for i := range b.N {
			e.reset(b)
			e.interleave(i, []func(){
				func() { e.resetOllie(); td += timed(func() { e.deploy(b, false, false) }) },
				func() {
					e.resetOllie()
					e.cache = b.TempDir()
					tn += timed(func() { e.deploy(b, false, false) })
					e.cache = ""
				},
				func() { tr += timed(func() { e.rsync(b) }) },
				func() { tp += timed(func() { e.pscp(b) }) },
			})
			e.checkCopies(b)
		}
		e.report(b, "deploy", td, tr, tp)
		b.ReportMetric(tn.Seconds()/float64(b.N), "new-build-s/op")
		b.ReportMetric(tn.Seconds()/tr.Seconds(), "new-build/rsync")
	})

	// Warm: everything is in place already. rsync's quick check (size and
	// mtime, kept by -a) sends nothing; scp has no such check and copies
	// all again; deploy connects, probes, finds it up to date.
	b.Run("warm", func(b *testing.B) {
		// Deployed and copied first, untimed: -bench Deploy/warm alone
		// skips cold.
		if out, err := e.remote(append([]string{"deploy"}, e.hosts...)...); err != nil {
			b.Fatalf("ollie-remote deploy: %v\n%s", err, out)
		}
		e.rsync(b)
		var td, tr, tp time.Duration
		for i := range b.N {
			e.interleave(i, []func(){
				func() { td += timed(func() { e.deploy(b, true, false) }) },
				func() { tr += timed(func() { e.rsync(b) }) },
				func() { tp += timed(func() { e.pscp(b) }) },
			})
		}
		e.report(b, "deploy", td, tr, tp)
	})

	// Held: ollie-remote up holds the nine hosts, so deploy goes to the
	// keeper and runs over its connections, without an SSH handshake. up
	// needs a deploy before it, and rsync a copy to be warm, which -bench
	// Deploy/held alone would skip.
	if out, err := e.remote(append([]string{"deploy"}, e.hosts...)...); err != nil {
		b.Fatalf("ollie-remote deploy: %v\n%s", err, out)
	}
	e.rsync(b)
	if out, err := e.remote(append([]string{"up"}, e.hosts...)...); err != nil {
		b.Fatalf("ollie-remote up: %v\n%s", err, out)
	}
	b.Run("held", func(b *testing.B) {
		var td, tr time.Duration
		for i := range b.N {
			e.interleave(i, []func(){
				func() { td += timed(func() { e.deploy(b, true, true) }) },
				func() { tr += timed(func() { e.rsync(b) }) },
			})
		}
		n := float64(b.N)
		b.ReportMetric(td.Seconds()/n, "held-s/op")
		b.ReportMetric(td.Seconds()/n/float64(len(e.hosts)), "held-s/host")
		b.ReportMetric(tr.Seconds()/n, "rsync-s/op")
		b.ReportMetric(td.Seconds()/tr.Seconds(), "held/rsync")
		b.ReportMetric(0, "ns/op")
	})
}

// interleave runs ops in an order that rotates with i.
func (e *deployBench) interleave(i int, ops []func()) {
	for k := range ops {
		ops[(i+k)%len(ops)]()
	}
}

func timed(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

// report gives each tool's time per operation (nine hosts) and the ratios
// of deploy's to its peers'; the default ns/op, the sum of all three, is
// dropped.
func (e *deployBench) report(b *testing.B, name string, td, tr, tp time.Duration) {
	n := float64(b.N)
	b.ReportMetric(td.Seconds()/n, name+"-s/op")
	b.ReportMetric(tr.Seconds()/n, "rsync-s/op")
	b.ReportMetric(tp.Seconds()/n, "pscp-s/op")
	b.ReportMetric(td.Seconds()/tr.Seconds(), name+"/rsync")
	b.ReportMetric(td.Seconds()/tp.Seconds(), name+"/pscp")
	b.ReportMetric(0, "ns/op")
}

func (e *deployBench) remote(args ...string) (string, error) {
	full := append([]string{"-F", e.lab.ConfigFile, "-bin", binDir, "-data", dataDir}, args...)
	cmd := exec.Command(remoteBin, full...)
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+e.dir, "SSH_AUTH_SOCK=")
	if e.cache != "" {
		cmd.Env = append(cmd.Env, "XDG_CACHE_HOME="+e.cache)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// deploy runs ollie-remote deploy on the nine hosts and checks that each
// did what the case expects: everything sent, or nothing; through the
// keeper, or over a connection of its own.
func (e *deployBench) deploy(b *testing.B, upToDate, held bool) {
	out, err := e.remote(append([]string{"deploy"}, e.hosts...)...)
	if err != nil {
		b.Fatalf("ollie-remote deploy: %v\n%s", err, out)
	}
	for _, h := range e.hosts {
		row := strings.Join(tableRow(out, h), " ")
		if !strings.HasSuffix(row, " ok") && !strings.HasSuffix(row, " ok, up to date") || strings.Contains(row, "up to date") != upToDate {
			b.Fatalf("%s: deploy row %q (up to date wanted: %v)\n%s", h, row, upToDate, out)
		}
	}
	// Only a deploy that dials prints "connecting".
	if strings.Contains(out, ": connecting") == held {
		b.Fatalf("deploy went through the keeper: %v, want %v\n%s", !held, held, out)
	}
}

// rsync runs nine rsync -a over ssh at once, one per host, as a shell loop
// with & would.
func (e *deployBench) rsync(b testing.TB) {
	var wg sync.WaitGroup
	errs := make([]error, len(e.hosts))
	for i, h := range e.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("rsync", "-a", "-e", "ssh -F "+e.lab.ConfigFile, e.src+"/", h+":bench-rsync/")
			cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=")
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("rsync to %s: %v\n%s", h, err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// pscp copies the same files with Debian's parallel-scp (scp -qC per host,
// all hosts at once) into bench-pscp/, which reset makes empty.
func (e *deployBench) pscp(b *testing.B) {
	cmd := exec.Command("parallel-scp", "-h", e.hostsFile, "-x", "-F "+e.lab.ConfigFile, "-t", "0", "-r",
		filepath.Join(e.src, "olliesrv"), filepath.Join(e.src, "data"), "bench-pscp/")
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("parallel-scp: %v\n%s", err, out)
	}
}

// checkCopies makes sure each peer copied the binary whole: a peer that
// failed quietly would look fast.
func (e *deployBench) checkCopies(b *testing.B) {
	for _, h := range e.lab.Hosts {
		for _, p := range []string{"bench-rsync/olliesrv", "bench-pscp/olliesrv"} {
			fi, err := os.Stat(filepath.Join(h.Home, p))
			if err != nil || fi.Size() != e.binSize {
				b.Fatalf("%s: %s: %v (size %v, want %d)", h.Name, p, err, fi, e.binSize)
			}
		}
	}
}

// reset gives each host the state of a first deploy: no ollie, no daemon,
// a stock .bashrc, and an empty destination for scp (it copies several
// sources only into a directory that exists).
func (e *deployBench) reset(tb testing.TB) {
	e.resetOllie()
	for _, h := range e.lab.Hosts {
		for _, p := range []string{"bench-rsync", "bench-pscp"} {
			os.RemoveAll(filepath.Join(h.Home, p))
		}
		d := filepath.Join(h.Home, "bench-pscp")
		if err := os.Mkdir(d, 0755); err != nil {
			tb.Fatal(err)
		}
		os.Chown(d, h.UID, h.GID)
	}
}

// resetOllie removes what deploy left on each host: no ollie, no daemon,
// a stock .bashrc.
func (e *deployBench) resetOllie() {
	for _, h := range e.lab.Hosts {
		stockHome(h)
	}
}

var (
	streamsrvOnce sync.Once
	streamsrvBin  string
	streamsrvErr  error
)

// BenchmarkForward reads a namespace on a host through the ways to reach
// its socket, in the same loop: (a) ollie-remote up's path, the keeper's
// code in this process (tunnel.Host and a resume.Proxy on a local socket);
// (a') the same over a connection on which no session has run; (b) OpenSSH's ssh -L local.sock:remote.sock,
// with a command and with -N; (c) the server's socket itself, reachable
// here since the host is this machine: the floor.
// The server is testdata/streamsrv, run as the host's user.
// buildStreamsrv builds testdata/streamsrv once, beside the binaries
// TestMain builds, and removed with them.
func buildStreamsrv(b *testing.B) {
	streamsrvOnce.Do(func() {
		streamsrvBin = filepath.Join(binDir, "streamsrv")
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", streamsrvBin, "./testdata/streamsrv")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			streamsrvErr = fmt.Errorf("go build ./testdata/streamsrv: %v\n%s", err, out)
		}
	})
	if streamsrvErr != nil {
		b.Fatal(streamsrvErr)
	}
}

// serveProxy serves on sock what the keeper serves for a host it holds:
// a resuming proxy to remoteSock over th's connection. It returns sock.
func serveProxy(b *testing.B, th *tunnel.Host, remoteSock, sock string) string {
	proxy := &resume.Proxy{Log: slog.New(slog.DiscardHandler), Dial: func(ctx context.Context) (net.Conn, error) {
		c, err := th.Client(ctx)
		if err != nil {
			return nil, err
		}
		return c.DialUnix(remoteSock)
	}}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	go proxy.Serve(ln)
	b.Cleanup(func() { proxy.Close(); ln.Close() })
	return sock
}

func BenchmarkForward(b *testing.B) {
	buildStreamsrv(b)
	lab := sshlab.Start(b, sshlab.Config{Hosts: 1, UserPrefix: "orbench"})
	h := lab.Host(0)
	remoteSock := startStreamsrv(b, h)
	local, err := os.MkdirTemp("", "orf")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(local) })
	quiet := slog.New(slog.DiscardHandler)

	// (a) What the keeper does for a host it holds (keeper.go: up, dial).
	// up's first act on a new connection is an exec (olliesrv start, which
	// finds the running daemon); test -S stands for it here. It matters:
	// sshd turns TCP_NODELAY on for a connection only when a session
	// starts on it, and without it Nagle holds the tail of each reply.
	th := tunnel.NewHost(h.Name, tunnel.Options{ConfigFile: lab.ConfigFile, Log: quiet})
	b.Cleanup(func() { th.Close() })
	c, err := th.Client(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Run(context.Background(), "test -S "+remoteSock, nil); err != nil {
		b.Fatal(err)
	}
	upSock := serveProxy(b, th, remoteSock, filepath.Join(local, "up.sock"))

	// (a') The same without the exec, to set beside ssh -N -L: a connection
	// on which no session has run streams ten times slower, which is why
	// the keeper runs olliesrv start on every new connection.
	thBare := tunnel.NewHost(h.Name, tunnel.Options{ConfigFile: lab.ConfigFile, Log: quiet})
	b.Cleanup(func() { thBare.Close() })
	bareSock := serveProxy(b, thBare, remoteSock, filepath.Join(local, "bare.sock"))

	// (b) OpenSSH forwarding the same socket, twice: ssh -N -L, the usual
	// way, and ssh -L with a command running, whose session gets it
	// TCP_NODELAY as up's exec does.
	sshN := sshForward(b, lab, h.Name, filepath.Join(local, "sshN.sock"), remoteSock, false)
	sshL := sshForward(b, lab, h.Name, filepath.Join(local, "sshL.sock"), remoteSock, true)

	type path struct {
		name string
		c    *client.Conn
	}
	up, sshLc, sshNc, bare, direct := path{"up", dial(b, upSock)}, path{"sshL", dial(b, sshL)},
		path{"sshN", dial(b, sshN)}, path{"upNoExec", dial(b, bareSock)}, path{"direct", dial(b, remoteSock)}
	ctx := context.Background()

	// compare runs op on each path in every iteration and reports each
	// path's time per operation.
	compare := func(b *testing.B, paths []path, op func(*client.Conn)) []time.Duration {
		took := make([]time.Duration, len(paths))
		for i := range b.N {
			for k := range paths {
				j := (i + k) % len(paths)
				t0 := time.Now()
				op(paths[j].c)
				took[j] += time.Since(t0)
			}
		}
		for j, p := range paths {
			b.ReportMetric(float64(took[j].Nanoseconds())/float64(b.N), p.name+"-ns/op")
		}
		b.ReportMetric(0, "ns/op")
		return took
	}
	stream := func(b *testing.B, paths []path) []time.Duration {
		took := compare(b, paths, func(c *client.Conn) {
			var n countWriter
			if err := c.Follow(ctx, "big", &n); err != nil || n != 64<<20 {
				b.Fatalf("read big: %d bytes, %v", n, err)
			}
		})
		for j, p := range paths {
			b.ReportMetric(float64(b.N)*64*(1<<20)/1e6/took[j].Seconds(), p.name+"-MB/s")
		}
		return took
	}

	b.Run("small", func(b *testing.B) {
		took := compare(b, []path{up, sshLc, sshNc, bare, direct}, func(c *client.Conn) {
			data, err := c.ReadAll(ctx, "small")
			if err != nil || string(data) != "hello, world\n" {
				b.Fatalf("read small: %q, %v", data, err)
			}
		})
		b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "lat-up/sshL")
		b.ReportMetric(took[0].Seconds()/took[2].Seconds(), "lat-up/sshN")
	})
	b.Run("stream64MiB", func(b *testing.B) {
		took := stream(b, []path{up, sshLc, direct})
		b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "thru-up/sshL")
	})
	// Apart, so that their seconds per read do not leave the paths above
	// one iteration per run.
	b.Run("stream64MiB-nosession", func(b *testing.B) {
		took := stream(b, []path{bare, sshNc})
		b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "thru-upNoExec/sshN")
	})
}

type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}

// startStreamsrv runs the stream server as the host's user, as a daemon
// of that user's would run, and returns its socket.
func startStreamsrv(b *testing.B, h *sshlab.Host) string {
	dir := filepath.Join(h.Home, "bench-streamsrv")
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "streamsrv")
	if out, err := exec.Command("cp", streamsrvBin, exe).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v\n%s", err, out)
	}
	os.Chown(dir, h.UID, h.GID)
	os.Chown(exe, h.UID, h.GID)
	sock := filepath.Join(dir, "ns.sock")
	cmd := exec.Command(exe, sock)
	cmd.Dir = h.Home
	cmd.Env = []string{"HOME=" + h.Home, "USER=" + h.User, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(h.UID), Gid: uint32(h.GID)},
		Pdeathsig:  syscall.SIGKILL,
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		b.Fatalf("streamsrv did not start: %q %v\n%s", line, err, stderr.String())
	}
	return sock
}

func dial(b *testing.B, sock string) *client.Conn {
	c, err := client.DialAs(sock, "")
	if err != nil {
		b.Fatalf("dial %s: %v", sock, err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// sshForward runs ssh -L local:remote, with -N or with a command that
// lasts as long as ssh does (cat of a stdin that is never written), and
// returns once the local socket is there.
func sshForward(b *testing.B, lab *sshlab.Lab, host, local, remote string, session bool) string {
	args := []string{"-o", "StreamLocalBindUnlink=yes", "-o", "ExitOnForwardFailure=yes", "-L", local + ":" + remote, host}
	if session {
		args = append(args, "cat")
	} else {
		args = append([]string{"-N"}, args...)
	}
	ssh := lab.SSH(args...)
	ssh.Env = append(os.Environ(), "SSH_AUTH_SOCK=")
	if _, err := ssh.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	log := local + ".log"
	logf, err := os.Create(log)
	if err != nil {
		b.Fatal(err)
	}
	ssh.Stderr = logf
	err = ssh.Start()
	logf.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ssh.Process.Kill(); ssh.Wait() })
	waitSocket(b, local, log)
	return local
}

// waitSocket waits for ssh -L to bind its socket, which it does once it
// is logged in.
func waitSocket(b *testing.B, sock, log string) {
	await.Until(b, 15*time.Second, sock+" did not appear", func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}, func() string {
		msg, _ := os.ReadFile(log)
		return string(msg)
	})
}
