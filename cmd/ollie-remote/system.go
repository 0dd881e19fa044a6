package main

import (
	"context"
	"net"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/tunnel/deploy"
)

// deploySystem deploys to one host over a connection of its own, and
// installs the ollie command for every user with a sudo that sudo's
// broker approves: the request and its password go through the broker as
// a host's would, over an in-memory pipe, so that its rules, queue and
// limits hold for it too.
func deploySystem(ctx context.Context, c *common, host string, b *deploy.Bundle, sudo *desktop.Broker, progress func(string)) deploy.Result {
	return deployDirect(ctx, c, host, b, progress, broker.Dialed(func(context.Context) (net.Conn, error) {
		near, far := net.Pipe()
		go sudo.ServeConn(host, far)
		return near, nil
	}))
}
