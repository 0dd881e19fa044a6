package store

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkCommit measures one-record commits of a typical small record
// (about 300 bytes on disk), with the default fsync per commit and without.
// The ops/s metric goes in docs/benchmarks.md.
func BenchmarkCommit(b *testing.B) {
	data := json.RawMessage(`{"role":"assistant","text":"` + strings.Repeat("lorem ipsum ", 18) + `"}`)
	for _, bc := range []struct {
		name string
		opts *Options
	}{
		{"fsync", nil},
		{"nosync", &Options{NoSync: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := Create(filepath.Join(b.TempDir(), "s.jsonl"), Header{ID: "bench"}, bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := Record{Kind: "message", Data: data}
			for b.Loop() {
				if err := s.Commit(r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkOpen measures replaying a file of 10,000 such records.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "s.jsonl")
	s, err := Create(path, Header{ID: "bench"}, &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	data := json.RawMessage(`{"role":"assistant","text":"` + strings.Repeat("lorem ipsum ", 18) + `"}`)
	const n = 10000
	for range n {
		if err := s.Commit(Record{Kind: "message", Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	for b.Loop() {
		s, recs, err := Open(path, nil)
		if err != nil || len(recs) != n {
			b.Fatal(err, len(recs))
		}
		s.Close()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}
