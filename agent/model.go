package agent

import (
	"errors"
	"fmt"
	"strings"
)

// MaxModelLen bounds a model's name. The longest real ones (a Hugging Face
// repository with a quantisation tag) are under a hundred characters.
const MaxModelLen = 200

// ErrBadModel is the error CheckModel wraps.
var ErrBadModel = errors.New("agent: invalid model name")

// modelRule is what CheckModel allows, as its errors say it.
const modelRule = "a model name is 1 to 200 letters, digits and . _ : / - @ + (as in qwen2.5:7b, openai/gpt-4o, meta-llama/Llama-3.1-8B-Instruct), with no .. element and no leading /"

// CheckModel reports whether name may name a model: it is handed to
// backends, which put it in URLs and requests, and shown on terminals, so
// it holds only the characters real model ids need, never a path out
// (.., a leading /), and is bounded. Every place a model's name enters
// (agent/new, ctl model, cfg, generate, a profile) asks here. The error
// quotes no more than the start of a long name.
func CheckModel(name string) error {
	shown := name
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	why := ""
	switch {
	case name == "":
		why = "it is empty"
	case len(name) > MaxModelLen:
		why = fmt.Sprintf("it has %d characters", len(name))
	case strings.HasPrefix(name, "/"):
		why = "it starts with /"
	default:
		if i := strings.IndexFunc(name, func(r rune) bool { return !modelRune(r) }); i >= 0 {
			why = fmt.Sprintf("%q is not allowed in it", []rune(name[i:])[0])
			break
		}
		for _, elem := range strings.Split(name, "/") {
			if elem == ".." {
				why = "it has a .. element"
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w %q: %s; %s", ErrBadModel, shown, why, modelRule)
}

func modelRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("._:/-@+", r)
}
