package backend

// A backend on a Unix socket: the desktop's model, which ollie-remote
// forwards to the host over its SSH connection (tunnel/models serves it on
// the desktop, and adds the API key there).
//
// Every process of the host's user can connect to that socket, a
// sandboxed tool included (Landlock does not mediate connecting to a
// Unix socket, and the listening end is sshd, which cannot check its
// peers). So the desktop serves only requests that carry a key its keeper
// gave this daemon (SetSocketKey, through the root ctl): a tool has
// neither the key nor a way to read it.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
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

// socketKeys holds, per socket path, the key (in hex) that proves to the
// desktop's proxy that a request comes from this daemon. It is
// process-wide, not a backend's: ctl invalidate replaces every backend,
// while the keeper gives the key once per SSH connection, so the key must
// outlive the backends. It lives in this process's memory only: never in
// a file, a log line, an error, an event or the backends' listing.
var socketKeys struct {
	sync.Mutex
	m map[string]string
}

// SetSocketKey sets the key that requests to the socket backend at path
// carry (Authorization: Bearer, the key in hex), in place of any it had;
// an empty key removes it. Until one is set a socket backend sends no key,
// which the desktop answers with 503 and a Retry-After, and Chat retries:
// a daemon that has just started is given its key within a second.
func SetSocketKey(path string, key []byte) {
	path = filepath.Clean(path)
	socketKeys.Lock()
	defer socketKeys.Unlock()
	if len(key) == 0 {
		delete(socketKeys.m, path)
		return
	}
	if socketKeys.m == nil {
		socketKeys.m = map[string]string{}
	}
	socketKeys.m[path] = hex.EncodeToString(key)
}

func socketKey(path string) string {
	socketKeys.Lock()
	defer socketKeys.Unlock()
	return socketKeys.m[filepath.Clean(path)]
}

// socketTransport adds to a socket backend's requests the run they are
// for and the socket's key, in place of any Authorization (a key_env's):
// the desktop adds its own key upstream and takes only this one here.
type socketTransport struct {
	path string
	rt   http.RoundTripper
}

func (t socketTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if run, ok := req.Context().Value(runKey{}).(string); ok && run != "" {
		req.Header.Set(RunHeader, run)
	}
	req.Header.Del("Authorization")
	if key := socketKey(t.path); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return t.rt.RoundTrip(req)
}
