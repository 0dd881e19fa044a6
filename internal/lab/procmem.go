package lab

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PSS is the proportional set size of the processes, in bytes: each page
// shared by k of them counted 1/k (RSS counts the binary's pages, shared
// by every process of it, in full for each). A process gone is counted 0.
func PSS(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				n += kb << 10
			}
		}
	}
	return n
}
