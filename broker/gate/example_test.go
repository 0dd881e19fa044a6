package gate_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ollie/broker"
	"ollie/broker/gate"
)

// A host with no desktop broker connected parks a request until someone
// answers it, as writing "approve" to bypass/pending/{id} does through
// olliesrv's namespace.
func ExampleGate_Decide() {
	dir, err := os.MkdirTemp("", "ollie-gate")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	g := gate.New(nil)
	// The events olliesrv publishes on its bus; parking is the one to
	// wait for, rather than polling Pending.
	parked := make(chan string, 1)
	g.Publish = func(topic, data string) {
		if topic == "bypass.pending" {
			parked <- data
		}
	}
	sock := filepath.Join(dir, "elevate")
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	go g.Serve(l)
	defer g.Shutdown(context.Background())

	// A session's toolsrv asks, as toolsrv.GateApprover does.
	answered := make(chan string)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := net.Dial("unix", sock)
		if err != nil {
			answered <- err.Error()
			return
		}
		cv, ans, err := broker.Ask(ctx, c, &broker.Request{
			ID: "req-1", Session: "s1", Tool: "tail_log", Variant: -1,
			Executable: "/usr/bin/tail", Cwd: "/var/log", Bypass: true,
		})
		if err != nil {
			answered <- err.Error()
			return
		}
		cv.Close("ran")
		answered <- string(ans.Decision)
	}()

	id, _, _ := strings.Cut(<-parked, " ")
	req, _ := g.PendingRequest(id)
	// The gate blanks the host's name: only a desktop, from the SSH
	// connection, may say which host asks.
	fmt.Print(req.Prompt())
	if err := g.Decide(id, "approve"); err != nil {
		fmt.Println(err)
	}
	fmt.Println("answer:", <-answered)

	// Output:
	// ollie: (unknown host) asks to run outside its sandbox
	//   tool:     tail_log
	//   request:  req-1
	//   (unknown host) says:
	//     runs:     "/usr/bin/tail"
	//     in:       "/var/log"
	//     session:  "s1", no agent: called through the session's tools
	//     the agent asked for bypass
	// answer: once
}
