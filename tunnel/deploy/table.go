package deploy

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"ollie/internal/termsafe"
)

// WriteResults writes the table a deploy ends with, a row per host, and
// counts the hosts that failed and those that are degraded (ssh HOST
// ollie does not find the command, -system was not approved): not a
// failure, and the row says why.
func WriteResults(w io.Writer, results []Result) (failed, degraded int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tOS/ARCH\tBUILD\tSENT\tTIME\tRESULT")
	for _, r := range results {
		result := "ok"
		switch {
		case r.Err != "":
			result, failed = "FAILED", failed+1
		case len(r.Degraded) > 0:
			result, degraded = "ok, degraded: "+termsafe.Field(strings.Join(r.Degraded, "; "), MaxHostMessage), degraded+1
		case r.Files == 0 && len(r.Changed) <= 1:
			result = "ok, up to date"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2fs\t%s\n", termsafe.Line(r.Host), termsafe.Cell(r.Platform), termsafe.Cell(r.Version),
			sentCell(r), r.Took.Seconds(), result)
	}
	tw.Flush()
	return failed, degraded
}

// sentCell is what a deploy put on the wire, and what share of the files'
// size that was when they travelled compressed.
func sentCell(r Result) string {
	if r.Size > 0 && r.Sent < r.Size {
		return fmt.Sprintf("%s (%.1f%% of %s)", HumanBytes(r.Sent), 100*float64(r.Sent)/float64(r.Size), HumanBytes(r.Size))
	}
	return HumanBytes(r.Sent)
}
