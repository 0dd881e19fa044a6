package backend

// Ollama's context window. Ollama runs a model with num_ctx tokens of
// context: the num_ctx of the model's Modelfile if it sets one, else the
// server's default (OLLAMA_CONTEXT_LENGTH, else a small built-in value),
// and it silently drops the oldest messages of a prompt that does not fit.
// Its OpenAI-compatible /v1 API, which every chat of this package goes
// through, cannot set num_ctx. So for an Ollama backend:
//
//   - ContextLength is the window Ollama will really use, not the one the
//     model was trained for: the Modelfile's num_ctx if set, else the
//     backend's configured "context" (which says the server was started
//     with OLLAMA_CONTEXT_LENGTH), else OllamaDefaultContext; never more
//     than the trained length. The loop compacts at half of it, so nothing
//     reaches Ollama's silent truncation.
//   - When neither the Modelfile nor the configuration pins the window,
//     the first reply for each model carries a warning (also logged) that
//     says so and how to fix it.
//   - A reply whose prompt took 90% of the window or more carries a
//     warning that Ollama may have dropped messages.
//
// The README says why this package does not use Ollama's native /api/chat.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// OllamaDefaultContext is the window assumed when nothing pins it: Ollama's
// built-in default since 0.6.4 (2048 before), which OLLAMA_CONTEXT_LENGTH
// and newer servers may raise. Underestimating costs an early compaction;
// overestimating loses messages silently.
const OllamaDefaultContext = 4096

// ollamaWindow is the context window of one model on one Ollama server.
type ollamaWindow struct {
	size   int    // tokens
	pinned bool   // set by the Modelfile or the configuration, not assumed
	source string // where size comes from, for messages
	note   string // a mismatch worth a warning
}

// ollamaWindowOf returns the model's window, asking /api/show once per
// model. If Ollama cannot be asked, it is the configured or assumed
// window, not remembered.
func (b *OpenAI) ollamaWindowOf(ctx context.Context, model string) (ollamaWindow, error) {
	b.mu.Lock()
	w, ok := b.window[model]
	b.mu.Unlock()
	if ok {
		return w, nil
	}
	trained, numCtx, err := b.ollamaShow(ctx, model)
	w = b.windowFrom(model, trained, numCtx)
	if err != nil {
		return w, err
	}
	b.mu.Lock()
	if b.window == nil {
		b.window = map[string]ollamaWindow{}
	}
	b.window[model] = w
	b.mu.Unlock()
	return w, nil
}

func (b *OpenAI) windowFrom(model string, trained, numCtx int) ollamaWindow {
	var w ollamaWindow
	switch {
	case numCtx > 0:
		w = ollamaWindow{size: numCtx, pinned: true, source: "num_ctx in its Modelfile"}
		if b.cfg.Context > 0 && b.cfg.Context != numCtx {
			w.note = fmt.Sprintf("backend %s is configured with context %d, but the Modelfile of %s sets num_ctx %d, which Ollama uses", b.cfg.Name, b.cfg.Context, model, numCtx)
		}
	case b.cfg.Context > 0:
		w = ollamaWindow{size: b.cfg.Context, pinned: true, source: `"context" in the backend's configuration`}
	default:
		w = ollamaWindow{size: OllamaDefaultContext, source: "Ollama's default, assumed"}
	}
	if trained > 0 && w.size > trained {
		w.size = trained
		w.source += fmt.Sprintf(", capped at the %d tokens the model was trained for", trained)
	}
	return w
}

// ollamaCheck is run before each chat with an Ollama backend: it returns
// the window and the warnings due for this reply.
func (b *OpenAI) ollamaCheck(ctx context.Context, model string) (ollamaWindow, []string) {
	w, err := b.ollamaWindowOf(ctx, model)
	if err != nil {
		b.log().Debug("backend: ollama show", "backend", b.cfg.Name, "model", model, "error", err)
	}
	b.mu.Lock()
	first := !b.warned[model]
	if b.warned == nil {
		b.warned = map[string]bool{}
	}
	b.warned[model] = true
	b.mu.Unlock()
	if !first {
		return w, nil
	}
	var warnings []string
	if !w.pinned {
		msg := fmt.Sprintf("Ollama runs %s with its default context window (assumed %d tokens) and silently drops what does not fit; "+
			"its OpenAI API cannot change that. Start Ollama with OLLAMA_CONTEXT_LENGTH=N and set \"context\": N for backend %s in backends.json, "+
			"or set num_ctx in the model's Modelfile", model, w.size, b.cfg.Name)
		warnings = append(warnings, msg)
	}
	if w.note != "" {
		warnings = append(warnings, w.note)
	}
	for _, m := range warnings {
		b.log().Warn("backend: ollama context window", "backend", b.cfg.Name, "model", model, "warning", m)
	}
	return w, warnings
}

// ollamaShow asks /api/show for the model's trained context length
// (model_info "<arch>.context_length") and its Modelfile's num_ctx.
func (b *OpenAI) ollamaShow(ctx context.Context, model string) (trained, numCtx int, err error) {
	body, _ := json.Marshal(map[string]string{"model": model})
	var show struct {
		Parameters string                     `json:"parameters"`
		ModelInfo  map[string]json.RawMessage `json:"model_info"`
	}
	if err := b.ollamaDo(ctx, "POST", "/api/show", body, &show); err != nil {
		return 0, 0, err
	}
	for k, v := range show.ModelInfo {
		if strings.HasSuffix(k, ".context_length") {
			json.Unmarshal(v, &trained)
		}
	}
	for _, line := range strings.Split(show.Parameters, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
			numCtx, _ = strconv.Atoi(f[1])
		}
	}
	return trained, numCtx, nil
}

// ollamaModels lists the models Ollama has, from /api/tags.
func (b *OpenAI) ollamaModels(ctx context.Context) ([]string, error) {
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := b.ollamaDo(ctx, "GET", "/api/tags", nil, &tags); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range tags.Models {
		names = append(names, m.Name)
	}
	return names, nil
}

// ollamaDo calls Ollama's own API, which openai-go does not cover.
func (b *OpenAI) ollamaDo(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.root+path, rd)
	if err != nil {
		return &APIError{Backend: b.cfg.Name, Message: err.Error(), Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.key != "" {
		req.Header.Set("Authorization", "Bearer "+b.key)
	}
	res, err := b.client.Do(req)
	if err != nil {
		return &APIError{Backend: b.cfg.Name, Message: err.Error(), Err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return &APIError{Backend: b.cfg.Name, Status: res.StatusCode, Message: err.Error(), Err: err}
	}
	if res.StatusCode >= 400 {
		msg := parseErrorBody(data).message
		if msg == "" {
			msg = http.StatusText(res.StatusCode)
		}
		return &APIError{Backend: b.cfg.Name, Status: res.StatusCode, Message: msg}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &APIError{Backend: b.cfg.Name, Status: res.StatusCode, Message: fmt.Sprintf("%s %s: %v", method, path, err), Err: err}
	}
	return nil
}
