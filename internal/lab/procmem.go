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

// Parents maps every process /proc shows to its parent.
func Parents() map[int]int {
	parents := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
			parents[pid], _ = strconv.Atoi(f[1])
		}
	}
	return parents
}

// Descendants maps each descendant of root to its parent.
func Descendants(root int) map[int]int {
	parents := Parents()
	tree := map[int]int{}
	for pid, ppid := range parents {
		for p := ppid; p > 1; p = parents[p] {
			if p == root {
				tree[pid] = ppid
				break
			}
		}
	}
	return tree
}
