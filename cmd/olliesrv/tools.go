package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"ollie/ns/daemon"
	"ollie/ns/host"
	"ollie/ns/nsdir"
	"ollie/toolsrv"
	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
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
		return toolsList(stdout)
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

func toolsList(w io.Writer) int {
	path := toolsrv.ToolsPath()
	reg := toolsrv.Load(path, meta.LocalHost{})
	cwd, _ := os.Getwd()
	fmt.Fprintf(w, "tools path: %s\nsandbox: %s\n\n", strings.Join(path, ":"), sandbox.Describe(cwd))
	for _, e := range reg.Explain() {
		fmt.Fprintln(w, e.String())
	}
	if warns := reg.Warnings(); len(warns) > 0 {
		fmt.Fprintln(w, "\nwarnings:")
		for _, err := range warns {
			fmt.Fprintf(w, "  %v\n", err)
		}
	}
	if errs := reg.Errors(); len(errs) > 0 {
		fmt.Fprintln(w, "\nerrors:")
		for _, err := range errs {
			fmt.Fprintf(w, "  %v\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		}
	}
	fmt.Fprintf(w, "\n%d tools available\n", len(reg.Tools()))
	return 0
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
	name := fs.Arg(0)
	var input []byte
	switch {
	case fs.NArg() == 2:
		input = []byte(fs.Arg(1))
	case isTerminal(stdin):
		input = []byte("{}")
	default:
		var err error
		if input, err = io.ReadAll(stdin); err != nil {
			fmt.Fprintf(stderr, "olliesrv tools run: reading arguments: %v\n", err)
			return 1
		}
	}
	if !json.Valid(input) {
		fmt.Fprintf(stderr, "olliesrv tools run: the arguments are not valid JSON: %s\n", strings.TrimSpace(string(input)))
		return 2
	}
	if *cwd == "" {
		*cwd, _ = os.Getwd()
	}
	// Resolved once, as a session's directory is (toolsrv.Runner.CwdID).
	if real, err := filepath.EvalSymlinks(*cwd); err == nil {
		*cwd = real
	}
	path := toolsrv.ToolsPath()
	reg := toolsrv.Load(path, meta.LocalHost{})
	session := toolsrv.NewSession(reg)
	if err := session.Load(name); err != nil {
		fmt.Fprintf(stderr, "olliesrv tools run: %v (see olliesrv tools)\n", err)
		return 1
	}
	r := &toolsrv.Runner{Tools: session, Cwd: *cwd, Profiles: sandbox.DefaultProfiles(), ToolsPath: path}
	// Cut output is kept after exit, as the note tells, in a private
	// directory made only if some is cut.
	spill, err := host.DefaultStateDir()
	if err == nil {
		spill, err = toolsrv.SpillRoot(spill)
	}
	if err == nil {
		r.SpillBase = spill
	} else {
		fmt.Fprintf(stderr, "olliesrv tools run: %v; cut output goes under %s\n", err, os.TempDir())
	}
	// With a daemon running, its approval gate answers as it does for agents.
	if gate := filepath.Join(nsdir.NamespaceDir(), "elevate"); daemon.PID() != 0 {
		r.Approver = toolsrv.GateApprover{Socket: gate}
		r.ElevateSocket = gate
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res := r.Run(ctx, name, input)
	if len(res.Content) > 0 {
		fmt.Fprintf(stdout, "%s\n", res.Content)
	} else {
		io.WriteString(stdout, res.Output)
		if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
			io.WriteString(stdout, "\n")
		}
	}
	fmt.Fprintf(stderr, "[%s: sandbox %s, exit %d, %s]\n", name, res.Sandbox, res.ExitCode, res.Elapsed.Round(1e6))
	if res.Failed {
		return 1
	}
	return 0
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
