package toolsrv

import (
	"fmt"
	"io"
	"strings"

	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
)

// WriteList writes what "olliesrv tools" prints: the tools path, the
// sandbox a call in cwd gets, each tool with the variant chosen on this
// host and why, the registry's warnings and errors, and how many tools
// are available.
func WriteList(w io.Writer, path []string, cwd string) {
	reg := Load(path, meta.LocalHost{})
	fmt.Fprintf(w, "tools path: %s\nsandbox: %s\n\n", strings.Join(path, ":"), sandbox.Describe(cwd))
	for _, e := range reg.Explain() {
		fmt.Fprintln(w, e.String())
	}
	if warns := reg.Warnings(); len(warns) > 0 {
		fmt.Fprintln(w, "\nwarnings:")
		for _, err := range warns {
			fmt.Fprintf(w, "  %v\n", err)
		}
	}
	if errs := reg.Errors(); len(errs) > 0 {
		fmt.Fprintln(w, "\nerrors:")
		for _, err := range errs {
			fmt.Fprintf(w, "  %v\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		}
	}
	fmt.Fprintf(w, "\n%d tools available\n", len(reg.Tools()))
}
