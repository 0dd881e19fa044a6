package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// A Record is one entry of a session file. The store owns Kind, Seq and Time;
// the payload is the caller's, and the agent layer defines its own kinds.
//
// On disk a record is one flat JSON object: the payload's fields follow
// kind, seq and time, so `{"kind":"prompt","seq":7,"time":"...","text":"hi"}`
// is Record{Kind: "prompt", Seq: 7, Time: ..., Data: {"text":"hi"}}.
type Record struct {
	Kind string    // what the record is, e.g. "prompt"; never "header"
	Seq  uint64    // set by Commit; strictly increasing within a file
	Time time.Time // set by Commit when zero, in UTC

	// Data is the payload: a JSON object whose keys are not kind, seq or
	// time, or nil for none. Commit stores it compacted, with its keys in
	// the order given.
	Data json.RawMessage
}

// NewRecord returns a record of kind whose payload is v marshalled to JSON.
// v must marshal to an object (a struct or a map) or to null.
func NewRecord(kind string, v any) (Record, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Record{}, fmt.Errorf("store: record %q: %w", kind, err)
	}
	if string(data) == "null" {
		data = nil
	}
	return Record{Kind: kind, Data: data}, nil
}

// Decode unmarshals the record's payload into v.
func (r Record) Decode(v any) error {
	data := r.Data
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("store: record %d (%s): %w", r.Seq, r.Kind, err)
	}
	return nil
}

// The keys the store owns in every record line.
const (
	keyKind = "kind"
	keySeq  = "seq"
	keyTime = "time"
)

// kindHeader is the kind of a file's first line; no record may use it.
const kindHeader = "header"

// member is one key and raw value of a JSON object, in the order read.
type member struct {
	key string
	val json.RawMessage
}

// members splits a JSON object into its members, in order, with their
// values compacted. It fails on anything but exactly one object, and on a
// key given twice. It is not jsonx.Members: every record is written and
// read through it, so it scans compact JSON in place rather than decode
// token by token.
func members(data []byte) ([]member, error) {
	var c bytes.Buffer
	c.Grow(len(data))
	// Compact validates the whole input, so the scan below sees only
	// well-formed JSON without whitespace.
	if err := json.Compact(&c, data); err != nil {
		return nil, err
	}
	return split(c.Bytes())
}

// split is members for valid, compact JSON.
func split(obj []byte) ([]member, error) {
	if obj[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var ms []member
	var seen map[string]bool
	for i := 1; obj[i] != '}'; {
		if obj[i] == ',' {
			i++
		}
		end := skipValue(obj, i) // the key, a string
		key, err := unquote(obj[i:end])
		if err != nil {
			return nil, err
		}
		i = end + 1 // past the colon
		end = skipValue(obj, i)
		if seen == nil {
			seen = make(map[string]bool)
		}
		if seen[key] {
			return nil, fmt.Errorf("key %q given twice", key)
		}
		seen[key] = true
		ms = append(ms, member{key, obj[i:end:end]})
		i = end
	}
	return ms, nil
}

// skipValue returns the end of the JSON value starting at b[i]. b must be
// valid, compact JSON.
func skipValue(b []byte, i int) int {
	depth := 0
	for {
		switch b[i] {
		case '"':
			i = skipString(b, i)
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default: // a number, true, false or null
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
				i++
			}
		}
		if depth == 0 || i >= len(b) {
			return i
		}
		if b[i] == ',' || b[i] == ':' {
			i++
		}
	}
}

// skipString returns the end of the JSON string starting at b[i].
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		i += j
		// The quote ends the string unless an odd run of backslashes
		// escapes it.
		n := 0
		for k := i - 1; b[k] == '\\'; k-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
}

// unquote decodes a JSON string as encoding/json does: invalid UTF-8
// becomes U+FFFD, so that a kind or key reads back as every other JSON
// reader of the file sees it, and encodes back to the same bytes.
func unquote(q []byte) (string, error) {
	if len(q) < 2 || q[0] != '"' {
		return "", errors.New("not a string")
	}
	if bytes.IndexByte(q, '\\') < 0 && utf8.Valid(q) {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

// appendMembers appends ms as the inside of a JSON object. The values are
// compact already.
func appendMembers(buf []byte, ms []member) []byte {
	for i, m := range ms {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, m.key)
		buf = append(buf, ':')
		buf = append(buf, m.val...)
	}
	return buf
}

// appendString appends s as a JSON string, without the HTML escaping of
// encoding/json, so that keys read back byte for byte.
func appendString(buf []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
	}
	if plain {
		buf = append(buf, '"')
		buf = append(buf, s...)
		return append(buf, '"')
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// payload checks r.Data and returns its members.
func (r Record) payload() ([]member, error) {
	if len(bytes.TrimSpace(r.Data)) == 0 || string(bytes.TrimSpace(r.Data)) == "null" {
		return nil, nil
	}
	ms, err := members(r.Data)
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	for _, m := range ms {
		switch m.key {
		case keyKind, keySeq, keyTime:
			return nil, fmt.Errorf("payload uses the reserved key %q", m.key)
		}
	}
	return ms, nil
}

// appendRecord appends r as one flat JSON object and returns r with its
// payload normalised (compacted, nil when empty), as it will read back.
func appendRecord(buf []byte, r Record) ([]byte, Record, error) {
	// A kind that is not UTF-8 would be written as U+FFFD and read back
	// as another kind.
	if r.Kind == "" || r.Kind == kindHeader || !utf8.ValidString(r.Kind) {
		return nil, r, fmt.Errorf("invalid kind %q", r.Kind)
	}
	ms, err := r.payload()
	if err != nil {
		return nil, r, err
	}
	buf = append(buf, `{"kind":`...)
	buf = appendString(buf, r.Kind)
	buf = append(buf, `,"seq":`...)
	buf = strconv.AppendUint(buf, r.Seq, 10)
	buf = append(buf, `,"time":"`...)
	buf = r.Time.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, '"')
	start := len(buf)
	if len(ms) > 0 {
		buf = append(buf, ',')
		buf = appendMembers(buf, ms)
		r.Data = append(json.RawMessage{'{'}, buf[start+1:]...)
		r.Data = append(r.Data, '}')
	} else {
		r.Data = nil
	}
	buf = append(buf, '}')
	return buf, r, nil
}

// parseRecord decodes one flat record object, given as valid, compact JSON.
func parseRecord(obj []byte) (Record, error) {
	ms, err := split(obj)
	if err != nil {
		return Record{}, err
	}
	var r Record
	var rest []member
	var haveKind, haveSeq, haveTime bool
	for _, m := range ms {
		switch m.key {
		case keyKind:
			haveKind = true
			if r.Kind, err = unquote(m.val); err != nil {
				return Record{}, fmt.Errorf("kind: %w", err)
			}
		case keySeq:
			haveSeq = true
			if r.Seq, err = strconv.ParseUint(string(m.val), 10, 64); err != nil {
				return Record{}, fmt.Errorf("seq: %w", err)
			}
		case keyTime:
			haveTime = true
			ts, err := unquote(m.val)
			if err == nil {
				r.Time, err = time.Parse(time.RFC3339Nano, ts)
			}
			if err != nil {
				return Record{}, fmt.Errorf("time: %w", err)
			}
		default:
			rest = append(rest, m)
		}
	}
	switch {
	case !haveKind || r.Kind == "":
		return Record{}, errors.New("record has no kind")
	case r.Kind == kindHeader:
		return Record{}, errors.New("a header after the first line")
	case !haveSeq || r.Seq == 0:
		return Record{}, errors.New("record has no seq")
	case !haveTime:
		return Record{}, errors.New("record has no time")
	}
	if len(rest) > 0 {
		r.Data = append(appendMembers([]byte{'{'}, rest), '}')
	}
	return r, nil
}

// encodeLine encodes one commit as a line: a lone record as an object, a
// transaction as an array. The records must already carry seq and time.
func encodeLine(recs []Record) ([]byte, []Record, error) {
	out := make([]Record, len(recs))
	var buf []byte
	if len(recs) > 1 {
		buf = append(buf, '[')
	}
	for i, r := range recs {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		buf, out[i], err = appendRecord(buf, r)
		if err != nil {
			return nil, nil, fmt.Errorf("record %d of %d (%q): %w", i+1, len(recs), r.Kind, err)
		}
	}
	if len(recs) > 1 {
		buf = append(buf, ']')
	}
	return append(buf, '\n'), out, nil
}

// parseLine decodes one commit line (without its newline): an object or a
// non-empty array of objects. The whole line parses or none of it does.
func parseLine(line []byte) ([]Record, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, errors.New("empty line")
	}
	var c bytes.Buffer
	c.Grow(len(line))
	if err := json.Compact(&c, line); err != nil {
		return nil, err
	}
	b := c.Bytes()
	switch b[0] {
	case '{':
		r, err := parseRecord(b)
		if err != nil {
			return nil, err
		}
		return []Record{r}, nil
	case '[':
		var recs []Record
		for i := 1; b[i] != ']'; {
			if b[i] == ',' {
				i++
			}
			end := skipValue(b, i)
			r, err := parseRecord(b[i:end])
			if err != nil {
				return nil, fmt.Errorf("record %d of the transaction: %w", len(recs)+1, err)
			}
			recs = append(recs, r)
			i = end
		}
		if len(recs) == 0 {
			return nil, errors.New("empty transaction")
		}
		return recs, nil
	}
	return nil, errors.New("not a JSON object or array")
}
