package chat

import "testing"

// Issue 30: a chat that comes back after two restarts or more goes on
// after what it showed last, found in the restored stream, since its
// offset is another daemon's. Found in TestHealDrill: the offset skipped
// answers 40 to 45 and landed mid-line.
func TestResumeAt(t *testing.T) {
	restored := "prompt 39\n→ effect {\"n\":39}\n← effect: effect 39 recorded\nanswer 39 done\nprompt 40\n→ effect {\"n\":40}\n← effect: effect 40 recorded\nanswer 40 done\nprompt 41\n"
	const start = 1000
	for _, c := range []struct {
		name, tail string
		want       int64
		ok         bool
	}{
		{"shown up to prompt 40", "← effect: effect 39 recorded\nanswer 39 done\nprompt 40\n", start + int64(len("prompt 39\n→ effect {\"n\":39}\n← effect: effect 39 recorded\nanswer 39 done\nprompt 40\n")), true},
		{"then text a cut request streamed", "← effect: effect 39 recorded\nanswer 39 done\nprompt 40\nThe effect is being rec", start + int64(len("prompt 39\n→ effect {\"n\":39}\n← effect: effect 39 recorded\nanswer 39 done\nprompt 40\n")), true},
		{"nothing of it restored", "something this stream never held, long enough\n", 0, false},
		{"too short to be the chat's own", "done\n", 0, false},
	} {
		got, ok := resumeAt([]byte(restored), start, []byte(c.tail))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
