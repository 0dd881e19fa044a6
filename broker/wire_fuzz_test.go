package broker

import (
	"context"
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
