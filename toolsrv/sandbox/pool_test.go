//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
)

// testPool, when set, makes run (and so every test that confines a tool
// through it: the escape tests) go through pre-started helpers. It is set
// in a re-run of the test binary with poolTestEnv (TestEscapesThroughPool).
var testPool *Pool

const poolTestEnv = "SANDBOX_TEST_POOL"

func runPooled(t *testing.T, ctx context.Context, p *Pool, pol *Policy, dir, tool string, args ...string) result {
	t.Helper()
	c, err := p.Command(ctx, pol, tool, args)
	if err != nil {
		t.Fatalf("Pool.Command: %v", err)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr, c.Dir = &stdout, &stderr, dir
	if err := c.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	err = c.Wait()
	r := result{stdout.String(), stderr.String(), c.ExitCode()}
	var ee *ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("Wait: %v", err)
	}
	return r
}

func TestPoolSmoke(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	e := newEnv(t)
	r := runPooled(t, context.Background(), p, e.policy(t), e.cwd, "/bin/sh", "-c", "echo out; echo err >&2; pwd; echo $HOME; exit 3")
	t.Logf("%+v", r)
	_ = os.Getpid()
}
