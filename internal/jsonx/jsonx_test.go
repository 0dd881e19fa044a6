package jsonx

import (
	"errors"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b": 1, "a": [true, null]}`, `{"a":[true,null],"b":1}`},
		{` "x" `, `"x"`},
		{`{"a":{"d":1,"c":2}}`, `{"a":{"c":2,"d":1}}`},
		{`"<&>"`, `"\u003c\u0026\u003e"`},
		{`1.50`, `1.5`},
		{`12345678901234567890`, `12345678901234567000`}, // float64, as documented
		{`{"a":`, `{"a":`},                               // not JSON: as it was
		{``, ``},
	} {
		if got := string(Canonical([]byte(tc.in))); got != tc.want {
			t.Errorf("Canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Two spellings of one value read the same.
	a, b := Canonical([]byte(`{"x":1,"y":"z"}`)), Canonical([]byte("{\n  \"y\": \"z\",\n  \"x\": 1.0\n}"))
	if string(a) != string(b) {
		t.Errorf("two spellings of one object: %s and %s", a, b)
	}
}

func TestMembers(t *testing.T) {
	in := "{\n  \"tool\": \"grep\",\n  \"args\" : { \"n\": 1 , \"n2\": [1, 2] },\"z\":null }\n"
	ms, err := Members([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ key, val string }{{"tool", `"grep"`}, {"args", `{ "n": 1 , "n2": [1, 2] }`}, {"z", `null`}}
	if len(ms) != len(want) {
		t.Fatalf("Members = %d members, want %d", len(ms), len(want))
	}
	for i, m := range ms {
		if m.Key != want[i].key || string(m.Value) != want[i].val {
			t.Errorf("member %d = %q: %s, want %q: %s", i, m.Key, m.Value, want[i].key, want[i].val)
		}
		if got := in[m.KeyOffset:]; got[0] != '"' || got[1:1+len(m.Key)] != m.Key {
			t.Errorf("member %q: KeyOffset %d is at %.12q", m.Key, m.KeyOffset, got)
		}
		if got := in[m.ValueOffset : m.ValueOffset+int64(len(m.Value))]; got != string(m.Value) {
			t.Errorf("member %q: ValueOffset %d is at %q, want its value", m.Key, m.ValueOffset, got)
		}
	}

	if ms, err := Members([]byte(` {} `)); err != nil || len(ms) != 0 {
		t.Errorf("Members({}) = %v, %v; want none", ms, err)
	}
	// Keys repeat in different objects, and in a nested one.
	if _, err := Members([]byte(`{"a":{"a":1,"a":2},"b":{"a":3}}`)); err != nil {
		t.Errorf("nested repeated keys: %v, want them let through", err)
	}
}

func TestMembersRefuses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{`[1, 2]`, ErrNotObject},
		{`"obj"`, ErrNotObject},
		{`{"a":1} {"b":2}`, ErrTrailing},
		{`{"a":1} x`, ErrTrailing},
	} {
		if _, err := Members([]byte(tc.in)); !errors.Is(err, tc.want) {
			t.Errorf("Members(%q): %v, want %v", tc.in, err, tc.want)
		}
	}
	for _, in := range []string{``, `{`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `{1:2}`} {
		_, err := Members([]byte(in))
		if err == nil || errors.Is(err, ErrNotObject) || errors.Is(err, ErrTrailing) {
			t.Errorf("Members(%q): %v, want encoding/json's error", in, err)
		}
	}

	// A key spelled two ways is one key.
	in := `{"a":1, "b":2, "\u0061":3}`
	_, err := Members([]byte(in))
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) {
		t.Fatalf("Members(%s): %v, want a *DuplicateKeyError", in, err)
	}
	if dup.Key != "a" || dup.FirstOffset != 1 || dup.Offset != 15 {
		t.Errorf("duplicate: %+v, want key a first at 1, again at 15", *dup)
	}
	if got := dup.Error(); got != `key "a" given twice` {
		t.Errorf("error text %q", got)
	}
}

// The values are the input's bytes: a caller that compacts its input
// first gets compact values, as the session file's records need.
func TestMembersValuesAreInputBytes(t *testing.T) {
	in := []byte(`{"a":[1,{"b":"c"}],"d":"e\"f"}`)
	ms, err := Members(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(ms[0].Value) != `[1,{"b":"c"}]` || string(ms[1].Value) != `"e\"f"` {
		t.Errorf("values %s and %s, want the input's", ms[0].Value, ms[1].Value)
	}
}

func TestSimilarKey(t *testing.T) {
	known := []string{"name", "Tools", "tools"}
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{
		{"Name", "name", true},
		{"TOOLS", "Tools", true}, // the first in known's order
		{"nmae", "", false},
		{"", "", false},
	} {
		if got, ok := SimilarKey(tc.key, known); got != tc.want || ok != tc.ok {
			t.Errorf("SimilarKey(%q) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}
