package ns

import (
	"ollie/ns/nsdir"
	"ollie/ns/stream"
)

// Transitional (#10): callers move to ollie/ns/stream.
type Stream = stream.Stream

// Transitional (#10): callers move to ollie/ns/stream.
const DefaultRetain = stream.DefaultRetain

// Transitional (#10): callers move to ollie/ns/stream.
var (
	NewStream  = stream.NewStream
	ErrTrimmed = stream.ErrTrimmed
)

// Transitional (#10): callers move to ollie/ns/nsdir.
const Service = nsdir.Service

// Transitional (#10): callers move to ollie/ns/nsdir.
var (
	NamespaceDir = nsdir.NamespaceDir
	SocketPath   = nsdir.SocketPath
)
