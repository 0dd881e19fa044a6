package backend

// A backend on a Unix socket: the desktop's model, which ollie-remote
// forwards to the host over its SSH connection (tunnel/models serves it on
// the desktop, and adds the API key there).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"
)

// RunHeader names the run (the session) a request is for, for the
// desktop's accounting; it is sent to a socket backend only.
const RunHeader = "X-Ollie-Run"

type runKey struct{}

// socketDialer dials path whatever address a request names, and says what
// a missing socket means.
func socketDialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "unix", path)
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, &notConnected{path: path, err: err}
		}
		return c, err
	}
}

// notConnected is a socket backend whose socket nobody serves now: the
// desktop let the host go, or its keeper is reconnecting. It is retried
// (transientNet): a keeper that reconnects serves it again in a second.
type notConnected struct {
	path string
	err  error
}

func (e *notConnected) Error() string {
	return fmt.Sprintf("the desktop's model is not connected to this host (%s): ollie-remote up on the desktop carries it: %v", e.path, e.err)
}

func (e *notConnected) Unwrap() error { return e.err }

// runHeader adds the run a request is for.
type runHeader struct{ rt http.RoundTripper }

func (h runHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	if run, ok := req.Context().Value(runKey{}).(string); ok && run != "" {
		req = req.Clone(req.Context())
		req.Header.Set(RunHeader, run)
	}
	return h.rt.RoundTrip(req)
}
