// Package resume is the 9P proxy at the desktop's end of a tunnel: it
// relays 9P2000 between local clients and a remote server, and hides a
// dropped server connection from the clients: they see a pause, not an
// error. `ollie-remote up`'s keeper (tunnel/keeper) runs one per host,
// between the desktop's Unix socket and the host's namespace, reached over
// SSH.
//
// Forwarding bytes cannot survive a reconnect: the server forgets the
// connection's fids and the replies in flight are gone. So [Proxy] speaks
// 9P. For each client connection it keeps a server connection of its own
// (fids and tags pass through unchanged), the requests awaiting replies,
// and for every fid the attach it descends from, the names walked since,
// and the mode it was opened with. When the server connection fails it
// dials again, negotiates the same msize, rebuilds every fid (a temporary
// root per attach, a walk to the fid's path, an open with the same mode),
// and resends the requests that were in flight, with their tags.
//
// # What resumes
//
//   - A read of a stream (ns.StreamFile): a Tread at offset N answers the
//     bytes from N, whatever connection it arrives on, so the resent Tread
//     returns exactly what was not delivered: no loss, no duplicate.
//   - Any fid that was walked, stat'd, opened or read but never written:
//     it is rebuilt on the new connection. Note what "rebuilt" means: the
//     file is opened again, as a fresh open would. A snapshot file
//     (ns.ReadFile) takes a new snapshot, a directory lists anew, and a
//     subscription starts afresh, missing what was published while the
//     connection was down, and a wait file waits for the next change after
//     the new open. A stream keeps only its last bytes (stream.DefaultRetain);
//     an outage long enough for the reader to fall behind them ends the
//     read with the stream's own error.
//   - Requests that change nothing the replay does not rebuild: Tversion,
//     Tattach, Twalk, Topen, Tread, Tstat, Tclunk. They are resent.
//   - Tflush: when the server can no longer answer it, the proxy does,
//     answering the flushed request "interrupted" first.
//
// # What does not
//
//   - A request that changes the server (Twrite, Tcreate, Tremove, Twstat,
//     Tauth) in flight when the connection broke. It may or may not have
//     taken effect, and sending it again could do it twice, so it fails
//     with [ErrUncertain]. Requests sent while the connection is down are
//     held and sent once it is back; they are not in doubt.
//   - A fid that was written to. A request file (ns.RdWrFile) keeps the
//     reply to the last write in the server's fid; a fresh open would not
//     have it. Such a fid, an auth fid, and a fid whose file can no longer
//     be reached (removed, no longer permitted) are lost: every request on
//     it fails with [ErrLost], except Tclunk, which succeeds. Open the file
//     again.
//   - A server that answers the new Tversion with a smaller msize: reads in
//     flight may not fit, so the client's connection is closed.
//
// # What it holds for a server
//
// The server is the remote host, and a host may be hostile, so nothing it
// sends sizes what the proxy holds:
//
//   - msize is negotiated down to [Proxy.MaxMsize] (default
//     [DefaultMaxMsize], 256 KiB + 24) on both sides: a client's Tversion
//     is lowered before the server sees it, a server's Rversion before the
//     client does. No buffer is larger; a message claiming more ends the
//     server connection ("exceeds msize").
//   - Replies to no request (unknown tags, second replies, wrong types)
//     are discarded and counted, not logged one by one; past 16 the server
//     connection is dropped, with one log line giving the count.
//   - A server connection that ends before it answered any request past
//     Tversion and Tattach, a failed replay and a failed dial are followed
//     by a back-off: 100 ms doubling to 30 s, jittered, reset once a
//     connection answers a request. A connection that worked is redialled
//     at once.
//   - A Tversion unanswered for [Proxy.HandshakeTimeout] (default 10 s),
//     or a replay unfinished in three times that, drops the connection
//     (by closing it: SSH channels have no deadlines). The client's own
//     requests otherwise wait, by design: the client sets its time-outs.
//
// The package trusts no client either: a malformed message ends that
// client's connection, so that it cannot make the proxy reconnect forever.
package resume
