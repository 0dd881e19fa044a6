package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"ollie/host"
	"ollie/host/daemon"
	"ollie/ns/nsdir"
	"ollie/toolsrv"
)

const toolsUsage = `usage: olliesrv tools                 list the tools this host offers, the variant chosen and why
       olliesrv tools run NAME [JSON]  run a tool as an agent would (validation, sandbox,
                                       timeout, approval); JSON defaults to standard input,
                                       or {} when standard input is a terminal
Flags of run:
  -cwd DIR        the working directory the call runs in (default: the current one)
Exit status: 0 the tool succeeded, 1 it failed (the reason is printed), 2 usage error.
`

func toolsMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		cwd, _ := os.Getwd()
		toolsrv.WriteList(stdout, toolsrv.ToolsPath(), cwd)
		return 0
	}
	switch args[0] {
	case "run":
		return toolsRun(args[1:], stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, toolsUsage)
		return 0
	}
	fmt.Fprintf(stderr, "olliesrv tools: unknown command %q\n%s", args[0], toolsUsage)
	return 2
}

func toolsRun(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("olliesrv tools run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cwd := fs.String("cwd", "", "the working `directory` of the call")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprint(stderr, toolsUsage)
		return 2
	}
	input, err := toolsrv.TrialInput(fs.Args()[1:], stdin)
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv tools run: reading arguments: %v\n", err)
		return 1
	}
	trial := toolsrv.Trial{Cwd: *cwd, StateDir: host.DefaultStateDir}
	// With a daemon running, its approval gate answers as it does for agents.
	if daemon.PID() != 0 {
		trial.Gate = filepath.Join(nsdir.NamespaceDir(), "elevate")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return trial.Run(ctx, fs.Arg(0), input, stdout, stderr)
}
