package shell

import (
	"context"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"9fans.net/go/plan9"

	"ollie/internal/termsafe"
)

// shellCompleter completes the shell's command names and, after them,
// namespace paths, listing directories on the server as it goes.
type shellCompleter struct{ sh *ollieShell }

// Do implements readline.AutoCompleter: it returns the possible endings of
// the word before pos and the length of the part they continue.
func (c shellCompleter) Do(line []rune, pos int) ([][]rune, int) {
	before := string(line[:pos])
	start := strings.LastIndexAny(before, " \t>") + 1
	word := before[start:]
	var ends [][]rune
	if strings.TrimSpace(before[:start]) == "" {
		for _, cmd := range shellCommands {
			if strings.HasPrefix(cmd, word) {
				ends = append(ends, []rune(cmd[len(word):]+" "))
			}
		}
		return ends, utf8.RuneCountInString(word)
	}
	dir, base := path.Split(word)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	dirs, err := c.sh.conn.Ls(ctx, c.sh.abs(dir))
	if err != nil {
		return nil, 0
	}
	for _, d := range dirs {
		if strings.Contains(d.Name, "/") || !strings.HasPrefix(d.Name, base) {
			continue // not in a directory, or not a match
		}
		if !termsafe.Safe(d.Name, false) {
			continue // the line editor would show its controls to the terminal
		}
		end := d.Name[len(base):] + " "
		if d.Qid.Type&plan9.QTDIR != 0 {
			end = d.Name[len(base):] + "/"
		}
		ends = append(ends, []rune(end))
	}
	return ends, utf8.RuneCountInString(base)
}
