// Package tunnel is SSH as users expect it: what works with `ssh web1`
// works here, over one connection per host that carries commands, SFTP
// and forwarded Unix sockets both ways.
//
// It exists because the ways SSH tools fail users are known: a ProxyJump
// or IdentityFile in ~/.ssh/config that the tool ignores, so a host
// reachable by ssh is not reachable by the tool; a first connect that fails
// once (a slow jump host, a restarting sshd) and is reported as the host
// being down; twenty parallel commands on one connection, of which the ones
// past sshd's MaxSessions (10) are refused; a dead network path that hangs
// every call for minutes. So tunnel reads the user's ssh config (HostName,
// User, Port, IdentityFile, IdentitiesOnly, ProxyJump chains, ConnectTimeout,
// ServerAliveInterval/CountMax, UserKnownHostsFile), authenticates with
// ssh-agent and the identity files, bounds the session channels it opens
// (Options.MaxSessions), sends keepalives, and Host redials with backoff.
//
// What it trusts: the known_hosts files, and nothing else, for host keys.
// There is no option to accept any key. An unknown host is refused with its
// fingerprint unless Options.AcceptNew adds it (as
// StrictHostKeyChecking=accept-new does); a changed key is always refused,
// naming the known_hosts line that holds the old one. ProxyJump hops are
// checked the same way.
package tunnel
