package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// replayed is a session file read back.
type replayed struct {
	header   Header
	records  []Record
	warnings []string
	good     int64 // the length of the file's complete, valid lines
}

// replay parses a whole session file. known is the newest storage version
// the caller understands. Only the last line may be damaged: it is then a
// commit whose write a crash cut short, and it is dropped.
func replay(path string, data []byte, known int) (*replayed, error) {
	corrupt := func(line int, format string, args ...any) error {
		return &CorruptError{Path: path, Line: line, Err: fmt.Errorf(format, args...)}
	}
	end := bytes.IndexByte(data, '\n')
	if end < 0 {
		if len(data) == 0 {
			return nil, corrupt(1, "the file is empty: no header")
		}
		return nil, corrupt(1, "the header line is incomplete")
	}
	h, err := parseHeader(data[:end], known)
	if err != nil {
		var nv *NewerVersionError
		if errors.As(err, &nv) {
			nv.Path = path
			return nil, nv
		}
		return nil, &CorruptError{Path: path, Line: 1, Err: err}
	}
	rp := &replayed{header: h, good: int64(end + 1)}
	var last uint64
	lineNo := 1
	for off := end + 1; off < len(data); {
		lineNo++
		line := data[off:]
		next := len(data)
		complete := false
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, next, complete = line[:i], off+i+1, true
		}
		isLast := next == len(data)
		if !complete {
			rp.warnings = append(rp.warnings, fmt.Sprintf(
				"line %d: dropped a torn last line (%d bytes without a newline); a crash cut its write short", lineNo, len(line)))
			break
		}
		if isLast && !json.Valid(line) {
			rp.warnings = append(rp.warnings, fmt.Sprintf(
				"line %d: dropped a torn last line (%d bytes of invalid JSON); a crash cut its write short", lineNo, len(line)))
			break
		}
		recs, err := parseLine(line)
		if err != nil {
			return nil, corrupt(lineNo, "%v", err)
		}
		for _, r := range recs {
			if r.Seq <= last {
				return nil, corrupt(lineNo, "seq %d does not follow %d", r.Seq, last)
			}
			last = r.Seq
		}
		rp.records = append(rp.records, recs...)
		rp.good = int64(next)
		off = next
	}
	return rp, nil
}

// parseHeader decodes line 1. The version is read first, so that a file
// from a newer ollie is refused as such even if its header changed shape.
func parseHeader(line []byte, known int) (Header, error) {
	var v struct {
		Kind           string `json:"kind"`
		StorageVersion int    `json:"storageVersion"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return Header{}, fmt.Errorf("header: %w", err)
	}
	if v.Kind != kindHeader {
		return Header{}, fmt.Errorf("header: kind is %q, not %q", v.Kind, kindHeader)
	}
	if v.StorageVersion < 1 {
		return Header{}, fmt.Errorf("header: storage version %d", v.StorageVersion)
	}
	if v.StorageVersion > known {
		return Header{}, &NewerVersionError{File: v.StorageVersion, Known: known}
	}
	var hl headerLine
	if err := json.Unmarshal(line, &hl); err != nil {
		return Header{}, fmt.Errorf("header: %w", err)
	}
	if hl.ID == "" {
		return Header{}, errors.New("header: no session id")
	}
	return Header{hl.StorageVersion, hl.ID, hl.CreatedAt, hl.Meta}, nil
}
