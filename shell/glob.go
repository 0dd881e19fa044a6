package shell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"

	"9fans.net/go/plan9"

	"ollie/internal/termsafe"
	"ollie/ns/client"
)

// errReported is returned by a command that ran on several files and has
// reported on standard error those that failed: ollie exits 1 without
// printing it again.
var errReported = errors.New("some files failed")

// globRefused is the error of a command that writes, given a glob: a
// request goes to one file.
func globRefused(cmd string) string { return "a glob in " + cmd + ": name one file" }

// shownPath is how a file a glob matched is shown: relative to base when
// the pattern was relative (ollie's base is /, the shell's its working
// directory), absolute when it was absolute.
func shownPath(pattern, match, base string) string {
	if strings.HasPrefix(pattern, "/") {
		return match
	}
	if base == "/" {
		return strings.TrimPrefix(match, "/")
	}
	if rel, ok := strings.CutPrefix(match, base+"/"); ok {
		return rel
	}
	return match
}

// globCmd runs ls, read (the shell's cat) or stat on every file the glob
// pattern (abs resolved against base) matches, in lexical order, and
// prefixes each line of output with the file's path and ": ". ls lists a
// directory's entries so; a file it shows as its path alone, as ls of
// several files does. A file that fails is reported on stderr and the
// others go on (then errReported); ctx's end, a lost connection and a
// glob that matches nothing end the command and are returned. step gives
// the context of each request that should answer promptly; a read itself
// waits as long as its file does (a stream until it ends).
func globCmd(ctx context.Context, step func() (context.Context, context.CancelFunc), c *client.Conn,
	cmd, pattern, abs, base string, long bool, content, out, stderr io.Writer) error {
	sctx, cancel := step()
	matches, err := c.Glob(sctx, abs)
	if te := timedOut(sctx); te != nil && err != nil {
		err = te
	}
	cancel()
	if err != nil {
		return err
	}
	failed := false
	for _, m := range matches {
		shown := shownPath(pattern, m, base)
		prefix := termsafe.Line(shown) + ": "
		var err error
		sctx, cancel := step()
		switch cmd {
		case "ls":
			var d *plan9.Dir
			if d, err = c.Stat(sctx, m); err != nil {
				break
			}
			w := out
			if d.Qid.Type&plan9.QTDIR != 0 {
				w = &linePrefixer{w: out, prefix: []byte(prefix)} // ls ends every line
			}
			err = ollieLs(sctx, c, m, shown, long, w)
		case "stat":
			pw := &linePrefixer{w: out, prefix: []byte(prefix)}
			err = ollieStat(sctx, c, m, pw)
			pw.end()
		case "read":
			if _, err = c.Stat(sctx, m); err == nil {
				pw := &linePrefixer{w: content, prefix: []byte(prefix)}
				err = c.Follow(ctx, m, pw)
				pw.end()
			}
		}
		if te := timedOut(sctx); te != nil && err != nil {
			err = te
		}
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil || errors.Is(err, client.ErrConnLost):
			return err
		default:
			ollieError(stderr, err)
			failed = true
		}
	}
	if failed {
		return errReported
	}
	return nil
}

// linePrefixer writes prefix before each line written through it.
type linePrefixer struct {
	w      io.Writer
	prefix []byte
	mid    bool // within a line: the prefix is written
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if !l.mid {
			if _, err := l.w.Write(l.prefix); err != nil {
				return n, err
			}
			l.mid = true
		}
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line = p[:i+1]
			l.mid = false
		}
		m, err := l.w.Write(line)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(line):]
	}
	return n, nil
}

// end ends a last line left without a newline, so that the next file's
// prefix starts a line.
func (l *linePrefixer) end() {
	if l.mid {
		l.w.Write([]byte{'\n'})
		l.mid = false
	}
}
