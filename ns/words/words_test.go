package words

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "name=a cwd=/tmp", want: []string{"name=a", "cwd=/tmp"}},
		{in: "  name=a\tcwd=/tmp\n", want: []string{"name=a", "cwd=/tmp"}},
		{in: "name=a cwd='/home/me/my project'", want: []string{"name=a", "cwd=/home/me/my project"}},
		{in: `cwd="/a \"b\" \\c"`, want: []string{`cwd=/a "b" \c`}},
		{in: `cwd='it'\''s'`, want: []string{`cwd=it's`}},
		{in: "prompt=''", want: []string{"prompt="}},
		{in: "", want: nil},
		{in: "cwd='open", bad: true},
		{in: `cwd="open`, bad: true},
	} {
		got, err := Split(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error, got %q", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
}

// What Quote makes is one word, whatever it quotes, alone or as a key's
// value beside other words.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "plain", "my project", "it's", `a "b" \c`, "line\nbreak", "'", `''\''`, "\\", "tab\there"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := Split(Quote(s)); err != nil || len(got) != 1 || got[0] != s {
			t.Fatalf("Split(Quote(%q)) = %q, %v", s, got, err)
		}
		got, err := Split("name=a cwd=" + Quote(s) + " model=" + Quote(s))
		if want := []string{"name=a", "cwd=" + s, "model=" + s}; err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("a request with %q quoted twice split as %q, %v", s, got, err)
		}
	})
}
