package store

import (
	"fmt"
	"os"
)

// migrate runs the migrations from the file's storage version up to the
// one opts writes, then replaces the file atomically: a temporary file
// beside it is written and fsynced, renamed over it, and the directory
// fsynced. A crash at any point leaves the old file or the new one, whole.
// It returns the new file, open, appending and locked.
//
// The rewritten file has one record per line: a migration sees records,
// not commits, and every record in it is durable, so there is no partial
// transaction left to guard against.
func migrate(path string, rp *replayed, opts *Options) (*os.File, []Record, Header, error) {
	h := rp.header
	recs := rp.records
	from, to := h.StorageVersion, opts.version()
	for v := from; v < to; v++ {
		if opts.Migrations[v] == nil {
			return nil, nil, Header{}, fmt.Errorf("%w: %s is at storage version %d and nothing migrates version %d to %d",
				ErrNoMigration, path, from, v, v+1)
		}
	}
	for v := from; v < to; v++ {
		m := opts.Migrations[v]
		hv := h
		out, err := m(&hv, append([]Record(nil), recs...))
		if err != nil {
			return nil, nil, Header{}, fmt.Errorf("store: migrate %s from storage version %d to %d: %w", path, v, v+1, err)
		}
		var last uint64
		for i := range out {
			if out[i].Seq == 0 {
				out[i].Seq = last + 1
			}
			if out[i].Seq <= last {
				return nil, nil, Header{}, fmt.Errorf("store: migrate %s from storage version %d to %d: record %d: seq %d does not follow %d",
					path, v, v+1, i+1, out[i].Seq, last)
			}
			last = out[i].Seq
		}
		h, recs = hv, out
		h.StorageVersion = v + 1
	}
	buf, err := h.line()
	if err != nil {
		return nil, nil, Header{}, err
	}
	for i, r := range recs {
		r.Time = r.Time.UTC().Round(0)
		line, out, err := encodeLine([]Record{r})
		if err != nil {
			return nil, nil, Header{}, fmt.Errorf("store: migrate %s: %w", path, err)
		}
		recs[i] = out[0]
		buf = append(buf, line...)
	}
	f, tmp, err := writeTemp(path, "migrate", buf, opts)
	if err != nil {
		return nil, nil, Header{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, nil, Header{}, fmt.Errorf("store: migrate %s: %w", path, err)
	}
	if err := syncDir(path); err != nil {
		f.Close()
		return nil, nil, Header{}, err
	}
	return f, recs, h, nil
}
