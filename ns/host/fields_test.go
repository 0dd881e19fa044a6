package host

import (
	"reflect"
	"testing"
)

func TestFields(t *testing.T) {
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
		got, err := fields(tc.in)
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
