package main

import (
	"context"
	"net"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
)

// deploySystem deploys to one host over a connection of its own, and
// installs the ollie command for every user with a sudo that sudo's
// broker approves: the request and its password go through the broker as
// a host's would, over an in-memory pipe, so that its rules, queue and
// limits hold for it too.
func deploySystem(ctx context.Context, c *common, host string, b *deploy.Bundle, sudo *desktop.Broker, progress func(string)) deploy.Result {
	progress("connecting")
	start := time.Now()
	cl, err := tunnel.DialRetrying(ctx, host, c.options(), progress)
	if err != nil {
		return deploy.Result{Host: host, Err: err.Error(), Took: time.Since(start)}
	}
	defer cl.Close()
	ask := broker.Dialed(func(context.Context) (net.Conn, error) {
		near, far := net.Pipe()
		go sudo.ServeConn(host, far)
		return near, nil
	})
	r := deploy.PushWith(ctx, cl, b, deploy.Options{Keep: c.keep, Deadlines: c.deadlines, Progress: progress, System: ask})
	r.Host = host
	r.Took = time.Since(start)
	return r
}
