// Package healdrill is what the heal drills share (issue 30: olliesrv
// killed again and again while an agent works): a tool whose every run is
// a side effect recorded by its prompt's number, a model that asks for it
// once per prompt and then answers, and the count of effects that
// happened twice. Tests only.
package healdrill

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"ollie/agent/fakellm"
)

// WriteTool writes the tool "effect" into dir: it reads {"n": N}, waits a
// random 0, 0.1 or 0.2 s, appends N to effects and says so. It is not
// replay-safe: a run cut by a crash is never run again by itself.
func WriteTool(dir, effects string) error {
	if err := os.WriteFile(filepath.Join(dir, "effect.meta"), []byte(`{"description": "Record effect N.", "timeout": 60}`), 0644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "effect"), []byte(`#!/bin/sh
n=$(cat | tr -dc 0-9)
sleep 0.$(( $(od -An -N1 -tu1 /dev/urandom) % 3 ))
echo "$n" >> `+effects+`
echo "effect $n recorded"
`), 0755)
}

// Respond is the drill's model, for fakellm.Server.Respond: "prompt N"
// asks for effect N, and once the call has a result (run, or interrupted
// by a crash) the answer is "answer N done".
func Respond(r *fakellm.ChatRequest) fakellm.Response {
	n, called := "", false
	for _, m := range r.Messages {
		switch m.Role {
		case "user":
			n, called = strings.TrimPrefix(m.Text(), "prompt "), false
		case "tool":
			called = true
		}
	}
	if !called {
		return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "effect", Args: `{"n":` + n + `}`}}, Delay: 20 * time.Millisecond}
	}
	return fakellm.Response{Text: []string{"answer ", n, " done"}, Delay: 40 * time.Millisecond}
}

// Effects reads the effects recorded, and those recorded more than once.
func Effects(effects string) (all, twice []string) {
	b, _ := os.ReadFile(effects)
	seen := map[string]bool{}
	for _, n := range strings.Fields(string(b)) {
		if seen[n] {
			twice = append(twice, n)
		}
		seen[n] = true
		all = append(all, n)
	}
	return all, twice
}

// Answers looks for the answers to prompts 1 to n in text (a history, a
// chat): the prompts whose answer is missing, and how often each appears.
func Answers(text string, n int) (missing []int, times map[int]int) {
	times = map[int]int{}
	for i := 1; i <= n; i++ {
		times[i] = strings.Count(text, "answer "+strconv.Itoa(i)+" done")
		if times[i] == 0 {
			missing = append(missing, i)
		}
	}
	return missing, times
}
