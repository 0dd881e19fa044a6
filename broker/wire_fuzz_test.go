package broker

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzReceive feeds the desktop's reader whatever a host might send: it
// must never panic, accept a request without an id, or take a password
// attempt out of range.
func FuzzReceive(f *testing.F) {
	f.Add([]byte(`{"type":"request","request":{"id":"x","session":"s","tool":"t","sudo":true}}` + "\n" +
		`{"type":"password","id":"x","attempt":1,"problem":"wrong password"}` + "\n" + `{"type":"result","id":"x","result":"ran"}` + "\n"))
	f.Add([]byte(`{"type":"request","request":{"id":""}}` + "\n"))
	f.Add([]byte(`{"type":"password","id":"x","attempt":9}` + "\n"))
	f.Add([]byte("{\"type\":\"request\"" + "\x00\xff\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		host, desk := net.Pipe()
		go func() { host.Write(data); host.Close() }()
		defer desk.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		in, err := Receive(ctx, desk)
		if err != nil {
			return
		}
		if in.Req == nil || in.Req.ID == "" {
			t.Fatalf("accepted a request without an id: %+v", in.Req)
		}
		for range 4 {
			attempt, _, _, err := in.Next(ctx)
			if err != nil {
				return
			}
			if attempt < 0 || attempt > MaxPasswordAttempts {
				t.Fatalf("password attempt %d accepted", attempt)
			}
		}
	})
}

// ruled is an Answerer that fails the fuzzing run when Converse asks it
// for a password against the rules every hop keeps.
type ruled struct {
	t     *testing.T
	sudo  bool
	asked int
	ends  int
}

func (r *ruled) Decide(context.Context, *Request) (Answer, bool) { return Answer{Decision: Once}, true }

func (r *ruled) Password(_ context.Context, _ *Request, attempt int, _ string, give func([]byte) error) error {
	if !r.sudo || attempt != r.asked+1 || attempt > MaxPasswordAttempts {
		r.t.Fatalf("asked for password %d after %d asks (sudo %v)", attempt, r.asked, r.sudo)
	}
	r.asked++
	return give([]byte("pw"))
}

func (r *ruled) End(*Request, string) { r.ends++ }

// FuzzConverse feeds the answering side of every hop whatever an asker
// might send after its request: the answerer is asked for a password only
// for a sudo request, in turn, three times at most, and hears the end
// once; nothing panics or hangs.
func FuzzConverse(f *testing.F) {
	f.Add(true, []byte(`{"type":"password","id":"x","attempt":1}`+"\n"+`{"type":"password","id":"x","attempt":2}`+"\n"+`{"type":"result","id":"x","result":"ran"}`+"\n"))
	f.Add(true, []byte(`{"type":"password","id":"x","attempt":1}`+"\n"+`{"type":"password","id":"x","attempt":1}`+"\n"))
	f.Add(false, []byte(`{"type":"password","id":"x","attempt":1}`+"\n"))
	f.Add(true, []byte(`{"type":"password","id":"y","attempt":1}`+"\n"))
	f.Add(true, []byte(`{"type":"secret","id":"x","secret":"AAAA"}`+"\n\x00\xff"))
	f.Fuzz(func(t *testing.T, sudo bool, data []byte) {
		asker, answerer := net.Pipe()
		defer answerer.Close()
		go io.Copy(io.Discard, asker)
		req, _ := json.Marshal(&message{Type: "request", Request: &Request{ID: "x", Session: "s", Tool: "t", Sudo: sudo}})
		go func() {
			asker.Write(append(append(req, '\n'), data...))
			asker.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		in, err := Receive(ctx, answerer)
		if err != nil {
			t.Fatalf("the request itself was refused: %v", err)
		}
		r := &ruled{t: t, sudo: sudo}
		Converse(ctx, in, r, time.Second)
		if r.ends != 1 {
			t.Fatalf("End heard %d times", r.ends)
		}
	})
}
