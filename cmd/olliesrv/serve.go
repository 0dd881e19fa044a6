package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"ollie/agent/backend"
	"ollie/appliance"
	"ollie/broker/gate"
	"ollie/host"
	"ollie/ns/nsdir"
	"ollie/toolsrv"
	"ollie/tunnel/deploy"
)

func serveMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("olliesrv serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tcp := fs.String("tcp", "", "also serve on this TCP `address`: UNAUTHENTICATED, anyone who can connect reads what is world-readable (as none, who writes nothing)")
	sshAddr := fs.String("ssh", "", "also serve ollie over SSH on this TCP `address` (the appliance listener): keys from ~/.config/ollie/authorized_keys; default: ssh in ~/.config/ollie/olliesrv.yaml")
	trace := fs.Bool("trace", false, "log every 9P message to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "olliesrv serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if exe, err := os.Executable(); err == nil {
		os.Setenv(toolsrv.ClientEnv, exe)
	}
	conf, confFile, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv: %v\n", err)
		return 1
	}
	if *sshAddr == "" && conf.SSH != "" {
		*sshAddr = conf.SSH
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if conf.SSH != "" {
		log.Info("olliesrv: configuration", "file", confFile)
	}
	if *sshAddr != "" {
		// The listener's host is upgraded by ollie-remote deploy: what it
		// made current wins over the binary a unit or an image started.
		execDeployed(log)
	}
	cfg := host.Config{Version: version, Dir: nsdir.NamespaceDir(), TCP: *tcp, Log: log}
	if f, err := gate.DefaultAlwaysPath(); err == nil {
		cfg.AlwaysFile = f
	}
	reg, err := backend.Load()
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv: %v\n", err)
		return 1
	}
	for _, w := range reg.Warnings() {
		log.Warn("olliesrv: backends", "warning", w)
	}
	cfg.Registry = reg
	cfg.LoadBackends = backend.Load
	if *trace {
		cfg.Trace = stderr
	}
	d, err := host.Start(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv: %v\n", err)
		return 1
	}
	var sshSrv *appliance.Server
	var sshFailed <-chan error
	if *sshAddr != "" {
		if sshSrv, sshFailed, err = startSSH(*sshAddr, cfg.Dir, log); err != nil {
			fmt.Fprintf(stderr, "olliesrv: %v\n", err)
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d.Shutdown(sctx)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	restart := false
	select {
	case <-hup:
		log.Info("olliesrv: SIGHUP, restarting on the deployed binary")
		restart = true
	case <-ctx.Done():
		log.Info("olliesrv: signal received, shutting down")
	case <-d.Killed():
		log.Info("olliesrv: ctl kill, shutting down")
	case err := <-sshFailed:
		log.Error("olliesrv: ssh listener failed, shutting down", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if sshSrv != nil {
		if err := sshSrv.Shutdown(sctx); err != nil {
			log.Warn("olliesrv: ssh listener did not shut down cleanly", "err", err)
		}
	}
	if err := d.Shutdown(sctx); err != nil {
		log.Warn("olliesrv: shutdown did not finish cleanly", "err", err)
		if !restart {
			return 1
		}
	}
	if restart {
		return reexec(log)
	}
	return 0
}

// reexec replaces this process with the deployed binary (else this one)
// and the same arguments: the same pid, so a supervisor sees no exit.
// Every descriptor is close-on-exec, so the lock and the sockets are
// free for the new process to take.
func reexec(log *slog.Logger) int {
	exe, err := deploy.CurrentOrSelf()
	if err == nil {
		err = syscall.Exec(exe, os.Args, os.Environ())
	}
	log.Error("olliesrv: restart failed", "err", err)
	return 1
}

// execDeployed runs the deployed binary in place of this one when it is
// another file; it returns only when it is this one, or cannot run.
func execDeployed(log *slog.Logger) {
	exe := deploy.Current()
	if exe == "" {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	a, err1 := os.Stat(exe)
	b, err2 := os.Stat(self)
	if err1 != nil || err2 != nil || os.SameFile(a, b) {
		return
	}
	log.Info("olliesrv: running the deployed binary", "exe", exe)
	err = syscall.Exec(exe, os.Args, os.Environ())
	log.Warn("olliesrv: could not run the deployed binary; going on with this one", "exe", exe, "err", err)
}
