package sftpns_test

import (
	"log"

	gliderssh "github.com/gliderlabs/ssh"

	"ollie/appliance/sftpns"
	"ollie/ns/client"
)

// The sftp subsystem of a gliderlabs/ssh server. How a session reaches the
// namespace as its key's principal, and whether the key is read-only, are
// the listener's to decide; dialFor and readOnly stand for that here.
func Example() {
	var (
		dialFor  func(key gliderssh.PublicKey) (*client.Conn, error)
		readOnly func(key gliderssh.PublicKey) bool
	)
	srv := &gliderssh.Server{
		Addr: "127.0.0.1:2222",
		SubsystemHandlers: map[string]gliderssh.SubsystemHandler{
			"sftp": func(s gliderssh.Session) {
				key := s.PublicKey()
				fs := &sftpns.Server{
					Dial:     func() (*client.Conn, error) { return dialFor(key) },
					ReadOnly: readOnly(key),
				}
				if err := fs.Serve(s); err != nil {
					log.Printf("sftp session of %s: %v", s.RemoteAddr(), err)
				}
			},
		},
	}
	_ = srv // srv.ListenAndServe()
}
