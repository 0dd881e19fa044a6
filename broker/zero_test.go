package broker

import (
	"bytes"
	"context"
	"net"
	"testing"
)

func TestZero(t *testing.T) {
	buf := []byte("correct horse battery staple")
	Zero(buf[2:9]) // only the part it is given
	want := []byte("co\x00\x00\x00\x00\x00\x00\x00orse battery staple")
	if !bytes.Equal(buf, want) {
		t.Errorf("after Zero(buf[2:9]): %q, want %q", buf, want)
	}
	Zero(buf)
	if !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Errorf("after Zero(buf): %q, want only zero bytes", buf)
	}
	Zero(nil) // no panic
}

// TestSecretZeroes checks the answering side of the wire: Secret zeroes
// the password it was given once written.
func TestSecretZeroes(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	in := &Incoming{w: newWire(b), Req: &Request{ID: "id1"}}
	read := make(chan *message, 1)
	go func() {
		m, _ := newWire(a).read(context.Background())
		read <- m
	}()
	pw := []byte("s3cret")
	if err := in.Secret(pw); err != nil {
		t.Fatal(err)
	}
	if m := <-read; m == nil || string(m.Secret) != "s3cret" {
		t.Fatalf("sent %+v", m)
	}
	if !bytes.Equal(pw, make([]byte, len(pw))) {
		t.Errorf("Secret left the password in its buffer: %q", pw)
	}
}
