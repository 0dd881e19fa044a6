// Package mux serves one 9P2000 namespace made of several servers: a
// local tree at the root, and other servers mounted at directories of it.
// The desktop's fleet namespace is one: its own small tree (host/idx,
// run/, bypass/) with each held host's whole namespace, reached through
// that host's tunnel, at host/NAME/, so that
// `ollie read 'host/*/session/*/agent/*/state'` reads every host.
//
// [Mux] speaks 9P to its clients and to its servers; it is not a byte
// relay. For each client connection it keeps one connection to the local
// tree ([Mux.Local]), made at the client's Tversion and attached with the
// client's uname and aname, and, lazily, one to each mount point a walk
// reaches ([Mux.Mount]), attached with the same uname and an empty aname
// (the desktop's capability means nothing to a host). Every client fid
// stands for a fid of one of those servers, and the mux remembers the
// fid's path from the root; tags are the mux's own on each server
// connection. So the servers need know nothing of each other, and a
// request blocked in one (a read at the end of a stream, a wait file)
// holds nothing of another's: each request runs on its own.
//
// # Walks
//
// A walk is split where it crosses a mount point: the names before it are
// walked in the local tree, the name of the mount point itself lands on
// the mount's root, and the rest is walked there. A fid at a mount point
// is the mount's root: listing host/web1 lists the host's root, and its
// stat is the host's root's, named web1. The local tree must still have
// the directories that lead to a mount point (host/); whether it lists
// the mount point itself (host/web1) is its choice: the mux adds nothing
// to directory listings. Mounts do not nest: Mount is asked only about
// paths in the local tree.
//
// ".." is taken lexically, as ns/client does before it sends a path: the
// walk goes on from the parent of the path walked so far, reached again
// from the local root. So "host/web1/.." is host, whatever the host's
// server would make of ".." at its root. (Clients seldom send "..": the
// ollie command and the kernel's 9P and FUSE mounts resolve it
// themselves.)
//
// A walk that a server ends after its first name is partial, as 9P has
// it. A walk that reaches a mount that cannot be reached fails with an
// Rerror naming it, wherever in the walk the mount point comes, so that
// the client learns why rather than "not found".
//
// Qids of a mount are made distinct from the local tree's and from every
// other mount's by XORing their paths with a value drawn from the mount
// point (the same tree served by two hosts has the same qids); within a
// mount they stay unique. Directory entries read from a mount are changed
// the same way.
//
// # When a mount fails
//
// A mount whose dial or handshake fails, whose connection ends, or which
// breaks the protocol fails only its own requests: each gets an Rerror
// that begins with the mount point's names, "host web1: connection lost:
// ...", and the client's other fids go on working. A clunk always
// succeeds. The mux does not replay: fids on the lost connection stay
// lost (the keeper's resuming proxy, tunnel/resume, is what hides a host's
// outage from the mux). The next walk that reaches the mount point dials
// it again, and fids walked from there work.
//
// # What it trusts
//
// Mount holds the desktop's decisions, and the local tree is the
// desktop's own: losing the connection to it ends the client's
// connection. A mount is a remote host, hostile until proven otherwise:
// msize is capped at [Mux.MaxMsize] on both sides, every reply must parse,
// answer a request in flight and fit it (a read no longer than asked, a
// walk with no more qids than names, a stat that parses); one that does
// not ends that mount's connection, and nothing it sends sizes a buffer.
// A dial, a handshake, an attach and the answer to a flush are bounded by
// [Mux.HandshakeTimeout]; other requests wait as long as the mount takes,
// since blocking is what streams and wait files do, until the client
// flushes them. A Tflush is passed to the server holding the request, and
// answered once that request has its reply.
//
// Clients are trusted no further than ns trusts them: a malformed message
// ends the client's connection, and fids and outstanding requests are
// capped per connection. Authentication is not offered (Tauth fails), as
// in ns: who a client is follows from the socket it came in on.
package mux
