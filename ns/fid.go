package ns

import (
	"sync"
	"sync/atomic"

	"9fans.net/go/plan9"
)

// A fid is one fid of a connection: the protocol's part (open mode, qid,
// references) and ns's (st). The connection's table holds one reference
// and each request using the fid another; the last to let go clunks it,
// so a Tclunk never pulls state from under a request still running.
type fid struct {
	ref       atomic.Int32
	omode     atomic.Int32 // -1 until opened
	iounit    atomic.Uint32
	st        atomic.Pointer[fidState] // set by attach and by a whole walk
	dirOffset atomic.Int64             // where the next directory read must start (0 also)
	dirIndex  atomic.Int64             // the entry the next directory read starts at

	qmu sync.Mutex
	qid plan9.Qid
}

func (f *fid) Qid() plan9.Qid {
	f.qmu.Lock()
	defer f.qmu.Unlock()
	return f.qid
}

func (f *fid) setQid(q plan9.Qid) {
	f.qmu.Lock()
	f.qid = q
	f.qmu.Unlock()
}

// newFid enters fid num in the table and returns it with a reference for
// the caller.
func (c *conn) newFid(num uint32) (*fid, error) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if c.fidTab == nil {
		return nil, errUnknownFid // the connection has ended
	}
	if _, ok := c.fidTab[num]; ok {
		return nil, errDuplicateFid
	}
	f := &fid{}
	f.omode.Store(-1)
	f.ref.Store(2)
	c.fidTab[num] = f
	return f, nil
}

// lookupFid returns fid num with a reference for the caller, or nil.
func (c *conn) lookupFid(num uint32) *fid {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	f := c.fidTab[num]
	if f != nil {
		f.ref.Add(1)
	}
	return f
}

// deleteFid takes fid num out of the table; the table's reference passes
// to the caller.
func (c *conn) deleteFid(num uint32) *fid {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	f := c.fidTab[num]
	delete(c.fidTab, num)
	return f
}

// putFid lets go of a reference; the last clunks the fid.
func (c *conn) putFid(f *fid) {
	if f != nil && f.ref.Add(-1) == 0 {
		c.clunk(f)
	}
}
