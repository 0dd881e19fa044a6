package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"ollie/toolsrv/tool"
)

// The model is shown the session's tools at every request, so a turn that
// calls a tool asks for them twice; reading and decoding the schema took
// half a millisecond each time. The tools a run declares change only by a
// write to its ctl, which goes through this Child, or with the run itself
// (a restart reads the tools on disk again): the Child keeps what the run
// declared until either happens.

type declsCache struct {
	run  *childRun
	gen  uint64
	list []tool.FunctionDecl
}

// Decls returns the loaded tools as the model is shown them.
func (c *Child) Decls(ctx context.Context) ([]tool.FunctionDecl, error) {
	c.mu.Lock()
	kept, run, gen := c.decls, c.run, c.gen
	c.mu.Unlock()
	if kept.list != nil && kept.run == run && kept.gen == gen && run != nil && !isDone(run.exited) {
		return slices.Clone(kept.list), nil
	}
	c.schemaReads.Add(1)
	b, err := c.ReadFile(ctx, "schema")
	if err != nil {
		return nil, err
	}
	decls := []tool.FunctionDecl{}
	if err := json.Unmarshal(b, &decls); err != nil {
		return nil, fmt.Errorf("toolsrv: bad schema: %w", err)
	}
	c.mu.Lock()
	// Kept only as read with nothing changed meanwhile: a ctl write that
	// ended while the schema was read moved gen on, a restart changed run
	// (a read that started the run is not kept: the next one is).
	if c.gen == gen && run != nil && c.run == run {
		c.decls = declsCache{run: run, gen: gen, list: decls}
	}
	c.mu.Unlock()
	return slices.Clone(decls), nil
}

// toolsChanged forgets the kept declarations: a ctl write may have loaded,
// unloaded or reloaded tools.
func (c *Child) toolsChanged() {
	c.mu.Lock()
	c.gen++
	c.decls = declsCache{}
	c.mu.Unlock()
}
