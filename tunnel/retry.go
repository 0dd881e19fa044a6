package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// DialRetrying connects, trying again twice after errors that may pass (a
// refused or reset first connect, a timeout), never after a refusal that
// retrying cannot mend (host key, authentication, configuration, a name
// that does not resolve). progress hears of each retry.
func DialRetrying(ctx context.Context, host string, o Options, progress func(string)) (*Client, error) {
	delay := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cl, err := Dial(ctx, host, o)
		var dns *net.DNSError
		if err == nil || attempt == 3 || Permanent(err) || ctx.Err() != nil || errors.As(err, &dns) && dns.IsNotFound {
			return cl, err
		}
		progress(fmt.Sprintf("connecting failed (%v); trying again in %v", err, delay))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		delay *= 2
	}
}
