package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzParseLine feeds the line decoder anything: it must not panic, and
// whatever it accepts must encode and decode back to the same records, and
// agree with encoding/json about the payload.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"kind":"prompt","seq":1,"time":"2026-01-02T03:04:05.123Z","text":"hi"}`,
		`[{"kind":"a","seq":2,"time":"2026-01-02T03:04:05Z"},{"kind":"b","seq":3,"time":"2026-01-02T03:04:05+01:00","x":{"y":[1,"]}",null]}}]`,
		`{"kind":"k","seq":4,"time":"2026-01-02T03:04:05Z","q":"a\"b\\","\u006b2":true}`,
		` { "kind" : "w" , "seq" : 5 , "time" : "2026-01-02T03:04:05Z" , "n" : -1.5e3 } `,
		`[]`, `{}`, `[{"kind":"x"}`, `{"kind":"header","seq":1,"time":"2026-01-02T03:04:05Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		recs, err := parseLine(line)
		if err != nil {
			return
		}
		for _, r := range recs {
			if r.Kind == "" || r.Kind == kindHeader || r.Seq == 0 {
				t.Fatalf("accepted %+v", r)
			}
			if r.Data != nil {
				var got, want map[string]any
				if err := json.Unmarshal(r.Data, &got); err != nil {
					t.Fatalf("payload %s: %v", r.Data, err)
				}
				json.Unmarshal(line, &want) // for a lone record only
				if line := bytes.TrimSpace(line); line[0] == '{' {
					delete(want, "kind")
					delete(want, "seq")
					delete(want, "time")
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("payload %v, encoding/json says %v", got, want)
					}
				}
			}
		}
		enc, _, err := encodeLine(recs)
		if err != nil {
			if !validTimes(recs) {
				return
			}
			t.Fatalf("re-encoding %+v: %v", recs, err)
		}
		again, err := parseLine(bytes.TrimSuffix(enc, []byte("\n")))
		if err != nil {
			t.Fatalf("decoding %s: %v", enc, err)
		}
		if len(again) != len(recs) {
			t.Fatalf("%d records, then %d", len(recs), len(again))
		}
		for i := range recs {
			a, b := recs[i], again[i]
			if a.Kind != b.Kind || a.Seq != b.Seq || !a.Time.Equal(b.Time) || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("record %d: %+v, then %+v", i, a, b)
			}
		}
	})
}

func validTimes(recs []Record) bool {
	for _, r := range recs {
		if y := r.Time.Year(); y < 0 || y > 9999 {
			return false
		}
	}
	return true
}

func TestEncodeLine(t *testing.T) {
	tm := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	line, out, err := encodeLine([]Record{{Kind: "p", Seq: 7, Time: tm, Data: json.RawMessage(`{ "text" : "a<b" }`)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"p","seq":7,"time":"2026-01-02T03:04:05.000006Z","text":"a<b"}` + "\n"; string(line) != want {
		t.Errorf("line %s, want %s", line, want)
	}
	if string(out[0].Data) != `{"text":"a<b"}` {
		t.Errorf("normalised payload %s", out[0].Data)
	}
}
