package host

import (
	"fmt"
	"strings"

	"ollie/ns/words"
)

// A keyValue is one key=value word of a request.
type keyValue struct{ key, value string }

// keyValues splits a request of key=value words (words.Split) into its words,
// in order, refusing a word that is not key=value and a key given twice:
// which of the two was meant is not for olliesrv to guess, and a check of
// the first would pass while the last took effect. keys are the keys the
// request takes, for the errors; a key not among them is the caller's to
// refuse, with what it means.
func keyValues(s string, keys []string) ([]keyValue, error) {
	words, err := words.Split(s)
	if err != nil {
		return nil, err
	}
	var out []keyValue
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value (keys: %s)", w, strings.Join(keys, ", "))
		}
		for _, kv := range out {
			if kv.key == k {
				return nil, fmt.Errorf("%s given twice: give each key once (keys: %s)", k, strings.Join(keys, ", "))
			}
		}
		out = append(out, keyValue{k, v})
	}
	return out, nil
}
