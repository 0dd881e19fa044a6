package paths

import (
	"fmt"
	"strings"
)

// A FileError is a mistake in one of ollie's files, located: the file, the
// line when known, and the path of the offending field, with an index for
// list items ("prompt[1]", "net.connect[1]"). Kind names what reads the
// file ("agent", "sandbox") and starts the message.
type FileError struct {
	Kind  string
	File  string
	Line  int // 0 when not known
	Field string
	Err   error
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind)
	b.WriteString(": ")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }
