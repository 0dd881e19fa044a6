// Package jsonx holds what ollie does with JSON beyond encoding/json:
// comparing two spellings of one value, and reading an object's members
// in their written order with duplicate keys refused.
//
// Tool arguments, records of the session file and configuration files
// are JSON objects that people and models write, so the order of their
// keys means something to a reader, and a key given twice is a mistake
// that encoding/json would hide by keeping the last.
package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Canonical returns b decoded and encoded again by encoding/json: compact,
// object keys sorted, HTML characters escaped, and numbers as float64
// (an integer beyond 2^53 loses precision), so that two spellings of one
// value read the same. b is returned unchanged when it is not valid JSON.
func Canonical(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	out, _ := json.Marshal(v) // a decoded value always encodes
	return out
}

// A Member is one key of a JSON object and its value.
type Member struct {
	Key         string
	Value       json.RawMessage // as written, without the whitespace around it
	KeyOffset   int64           // where the key's opening quote is in the input
	ValueOffset int64           // where Value begins in the input
}

// ErrNotObject is the error of Members for valid JSON that is not an
// object, and ErrTrailing its error for anything after the object.
var (
	ErrNotObject = errors.New("not a JSON object")
	ErrTrailing  = errors.New("data after the JSON object")
)

// A DuplicateKeyError reports a key given twice in one object.
type DuplicateKeyError struct {
	Key         string
	Offset      int64 // of the second
	FirstOffset int64
}

func (e *DuplicateKeyError) Error() string { return fmt.Sprintf("key %q given twice", e.Key) }

// Members splits the JSON object in data into its members, in the order
// written. It fails on anything but exactly one object: with
// encoding/json's error for invalid JSON, ErrNotObject, ErrTrailing, or a
// *DuplicateKeyError. Values are only checked to be valid JSON: an object
// nested in one may repeat its keys.
func Members(data []byte) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, ErrNotObject
	}
	var ms []Member
	first := map[string]int64{}
	for dec.More() {
		keyAt := skipSpace(data, dec.InputOffset(), ",")
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // a decoder returns an object's keys as strings
		if at, dup := first[key]; dup {
			return nil, &DuplicateKeyError{Key: key, Offset: keyAt, FirstOffset: at}
		}
		first[key] = keyAt
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		ms = append(ms, Member{Key: key, Value: raw, KeyOffset: keyAt, ValueOffset: dec.InputOffset() - int64(len(raw))})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ErrTrailing
	}
	return ms, nil
}

// skipSpace returns the offset of the first byte at or after off that is
// neither JSON whitespace nor one of the separators in also.
func skipSpace(data []byte, off int64, also string) int64 {
	for off < int64(len(data)) {
		switch c := data[off]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case bytes.IndexByte([]byte(also), c) >= 0:
		default:
			return off
		}
		off++
	}
	return off
}

// SimilarKey returns the known key that key differs from only in case,
// the likely meaning of a key a person misspelt.
func SimilarKey(key string, known []string) (string, bool) {
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k, true
		}
	}
	return "", false
}
