package broker_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"ollie/broker"
)

// person is an Answerer that approves once and gives one password: what
// a desktop's approver does after asking someone. ended hears how the
// conversation ended.
type person struct{ ended chan string }

func (person) Decide(context.Context, *broker.Request) (broker.Answer, bool) {
	return broker.Answer{Decision: broker.Once}, true
}

func (person) Password(_ context.Context, _ *broker.Request, attempt int, _ string, give func([]byte) error) error {
	return give([]byte("hunter2")) // give sends it and zeroes this copy
}

func (p person) End(_ *broker.Request, how string) { p.ended <- how }

// One sudo request, asked over a connection and answered by the same
// rules every hop follows (Converse): approved, then the password, then
// the asker's result.
func ExampleDialed() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := person{ended: make(chan string, 1)}
	ask := broker.Dialed(func(context.Context) (net.Conn, error) {
		near, far := net.Pipe()
		go func() {
			in, err := broker.Receive(ctx, far)
			if err != nil {
				fmt.Println(err)
				return
			}
			broker.Converse(ctx, in, p, 0)
		}()
		return near, nil
	})

	grant, err := ask.Approve(ctx, &broker.Request{Session: "s1", Tool: "restart_nginx", Variant: -1, Executable: "/usr/sbin/nginx", Cwd: "/", Sudo: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	pw, err := grant.Password(ctx, 1, "")
	fmt.Printf("password of %d bytes, %v\n", len(pw), err)
	broker.Zero(pw)
	grant.Close("ran")
	fmt.Println("ended:", <-p.ended)
	// Output:
	// password of 7 bytes, <nil>
	// ended: ran
}
