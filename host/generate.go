package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/ns"
)

// generateRequest is the JSON form of a generate request; plain text is a
// prompt on its own.
type generateRequest struct {
	Prompt  string `json:"prompt"`
	System  string `json:"system,omitempty"`
	Model   string `json:"model,omitempty"`
	Backend string `json:"backend,omitempty"`
}

// generate answers one prompt with no history and no tools.
func (n *namespace) generate(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	var r generateRequest
	trimmed := bytes.TrimSpace(req)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf(`generate: a JSON request is {"prompt": TEXT, "system": TEXT, "model": NAME, "backend": NAME}: %v`, err)
		}
	} else {
		r.Prompt = string(trimmed)
	}
	if strings.TrimSpace(r.Prompt) == "" {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if r.Model != "" {
		if err := agent.CheckModel(r.Model); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
	}
	be, err := n.backend(r.Backend)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	var msgs []backend.Message
	if r.System != "" {
		msgs = append(msgs, backend.Message{Role: backend.RoleSystem, Content: r.System})
	}
	msgs = append(msgs, backend.Message{Role: backend.RoleUser, Content: r.Prompt})
	reply, err := be.Chat(ctx, msgs, nil, backend.Params{Model: r.Model}, nil)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	out := reply.Message.Content
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return []byte(out), nil
}
