package backend

// Ollama, through its own API and its official Go client,
// github.com/ollama/ollama/api: the models (/api/tags), what a model is
// (/api/show), what the server runs (/api/ps), and the context window an
// agent gets.
//
// Ollama runs a model with num_ctx tokens of context and, unless told
// otherwise, drops the oldest messages of a prompt that does not fit
// without a word. Its OpenAI-compatible /v1 API cannot set num_ctx, so an
// Ollama backend chats through the native /api/chat (ollamachat.go), and
// every request carries:
//
//   - options.num_ctx: the window chosen here (chooseWindow), the same for
//     every request to a model, so Ollama loads the model once with it;
//   - truncate: false, so a prompt that does not fit is an error
//     (ErrContextOverflow, on which the loop compacts) rather than a
//     silent cut;
//   - shift: false, so a reply that reaches the end of the window stops
//     (finish "length") rather than dropping the start of the context.
//
// ContextLength is that window, so the loop, which compacts when a prompt
// takes more than half of it, compacts before the window is full. After
// the first reply for a model, /api/ps says what Ollama really runs it
// with; a smaller window (Ollama caps num_ctx at what the model was
// trained for, and a memory limit may cap it further) replaces the chosen
// one, with a warning.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ollama/ollama/api"
)

// OllamaContext is the window ollie asks Ollama for when the backend's
// "context" does not say: enough for an agent's system prompt, tool
// schemas and a working history, where Ollama's own default (4096 tokens
// on hosts with less than 23 GiB of VRAM) is not. A larger window costs
// memory on the Ollama host; "context" lowers or raises it.
const OllamaContext = 32768

// ollamaWindow is the context window of one model on one Ollama server.
type ollamaWindow struct {
	size    int    // tokens: the num_ctx sent with every chat
	trained int    // the model's trained context length, 0 if unknown
	source  string // why size, for models and warnings
	checked bool   // /api/ps was asked after a reply
}

// chooseWindow picks the num_ctx ollie sends for a model: the backend's
// "context" if set; else OllamaContext, or more when the Modelfile's
// num_ctx or the window the model is loaded with (/api/ps: what
// OLLAMA_CONTEXT_LENGTH or another client asked for) is larger, so as not
// to shrink a window someone chose nor reload a model for less; never
// more than the trained length, which Ollama would cap it at. A zero
// argument is unknown.
func chooseWindow(context, trained, modelfile, loaded int) ollamaWindow {
	w := ollamaWindow{size: OllamaContext, trained: trained, source: "num_ctx set by ollie"}
	switch {
	case context > 0:
		w.size, w.source = context, `num_ctx set by ollie: the backend's "context"`
	case loaded > max(w.size, modelfile):
		w.size, w.source = loaded, "num_ctx set by ollie: as loaded"
	case modelfile > w.size:
		w.size, w.source = modelfile, "num_ctx set by ollie: the Modelfile's"
	}
	if trained > 0 && w.size > trained {
		w.size = trained
		w.source += ", capped at the trained length"
	}
	return w
}

// ollamaWindowOf returns the model's window, asking /api/show and
// /api/ps once per model. If /api/show fails (no such model, no server),
// the window is chosen without it and not remembered.
func (b *OpenAI) ollamaWindowOf(ctx context.Context, model string) ollamaWindow {
	b.mu.Lock()
	w, ok := b.window[model]
	b.mu.Unlock()
	if ok {
		return w
	}
	trained, modelfile, err := b.ollamaShow(ctx, model)
	if err != nil {
		b.log().Debug("backend: ollama show", "backend", b.cfg.Name, "model", model, "error", err)
		return chooseWindow(b.cfg.Context, 0, 0, 0)
	}
	loaded, err := b.ollamaLoaded(ctx, model)
	if err != nil {
		b.log().Debug("backend: ollama ps", "backend", b.cfg.Name, "error", err)
	}
	w = chooseWindow(b.cfg.Context, trained, modelfile, loaded)
	b.mu.Lock()
	if b.window == nil {
		b.window = map[string]ollamaWindow{}
	}
	if cur, ok := b.window[model]; ok {
		w = cur // another request got there first, and may have checked it
	} else {
		b.window[model] = w
	}
	b.mu.Unlock()
	return w
}

// ollamaAfter is run after each reply from an Ollama backend: the first
// time for a model, it asks /api/ps what window the model really runs
// with and adopts a smaller one. It returns the warnings due.
func (b *OpenAI) ollamaAfter(ctx context.Context, model string, w ollamaWindow, r *Reply) []string {
	var warnings []string
	if !w.checked {
		running, err := b.ollamaLoaded(ctx, model)
		if err != nil {
			b.log().Debug("backend: ollama ps", "backend", b.cfg.Name, "error", err)
		}
		b.mu.Lock()
		cur, ok := b.window[model]
		if ok && !cur.checked {
			cur.checked = true
			if running > 0 && running < cur.size {
				warnings = append(warnings, fmt.Sprintf("Ollama runs %s with a context window of %d tokens, not the %d ollie asked for (%s); ollie compacts for %d",
					model, running, cur.size, cur.source, running))
				cur.size, cur.source = running, fmt.Sprintf("as Ollama runs it (/api/ps): num_ctx %d was asked for", cur.size)
			}
			b.window[model] = cur
		}
		if ok {
			w = cur
		}
		b.mu.Unlock()
	}
	if w.size > 0 && r.Usage.PromptTokens >= w.size*9/10 {
		warnings = append(warnings, fmt.Sprintf("the prompt took %d tokens of the %d-token context window of %s (%s); a longer one is refused, not cut",
			r.Usage.PromptTokens, w.size, model, w.source))
	}
	for _, m := range warnings {
		b.log().Warn("backend: ollama context window", "backend", b.cfg.Name, "model", model, "warning", m)
	}
	return warnings
}

// ollamaShow asks /api/show for the model's trained context length
// (model_info "<architecture>.context_length") and its Modelfile's
// num_ctx; 0 is absent.
func (b *OpenAI) ollamaShow(ctx context.Context, model string) (trained, numCtx int, err error) {
	show, err := b.ollama.Show(ctx, &api.ShowRequest{Model: model})
	if err != nil {
		return 0, 0, b.ollamaError(err, nil, model)
	}
	arch, _ := show.ModelInfo["general.architecture"].(string)
	for k, v := range show.ModelInfo {
		if k == arch+".context_length" || arch == "" && strings.HasSuffix(k, ".context_length") {
			if f, ok := v.(float64); ok && f > 0 {
				trained = int(f)
			}
		}
	}
	for _, line := range strings.Split(show.Parameters, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
			numCtx, _ = strconv.Atoi(f[1])
		}
	}
	return trained, numCtx, nil
}

// ollamaLoaded asks /api/ps the window the model is loaded with, 0 when
// it is not loaded.
func (b *OpenAI) ollamaLoaded(ctx context.Context, model string) (int, error) {
	ps, err := b.ollama.ListRunning(ctx)
	if err != nil {
		return 0, b.ollamaError(err, nil, "")
	}
	for _, m := range ps.Models {
		if sameModel(m.Name, model) || sameModel(m.Model, model) {
			return m.ContextLength, nil
		}
	}
	return 0, nil
}

// sameModel reports whether Ollama's name a is the name b, which may
// leave out the ":latest" tag as Ollama allows.
func sameModel(a, b string) bool {
	return a == b || !strings.Contains(b, ":") && a == b+":latest"
}

// ollamaModels lists the models Ollama has, from /api/tags.
func (b *OpenAI) ollamaModels(ctx context.Context) ([]string, error) {
	list, err := b.ollama.List(ctx)
	if err != nil {
		return nil, b.ollamaError(err, nil, "")
	}
	var names []string
	for _, m := range list.Models {
		names = append(names, m.Name)
	}
	return names, nil
}

// ollamaModelInfos lists the models with the window each would get.
func (b *OpenAI) ollamaModelInfos(ctx context.Context) ([]ModelInfo, error) {
	names, err := b.ollamaModels(ctx)
	if err != nil {
		return nil, err
	}
	var out []ModelInfo
	for _, n := range names {
		w := b.ollamaWindowOf(ctx, n)
		out = append(out, ModelInfo{Name: n, Context: w.size, Source: w.source})
	}
	return out, nil
}

// captureKey carries a *capture in a request's context, for
// ollamaTransport to fill: the official client keeps neither the status
// of a stream that failed later nor the headers (Retry-After).
type captureKey struct{}

// ollamaTransport adds the backend's key, if any, as a bearer token (for
// an Ollama behind a proxy that wants one; the official client sends
// none), and records each response's status and headers.
type ollamaTransport struct {
	next http.RoundTripper
	key  string
}

func (t *ollamaTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.key != "" && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	res, err := t.next.RoundTrip(req)
	if rec, ok := req.Context().Value(captureKey{}).(*capture); ok && res != nil {
		rec.status, rec.header = res.StatusCode, res.Header
	}
	return res, err
}

// newOllamaClient is the official client for the server at root.
func newOllamaClient(root string, transport http.RoundTripper, key string) (*api.Client, error) {
	u, err := url.Parse(root)
	if err != nil {
		return nil, err
	}
	return api.NewClient(u, &http.Client{Transport: &ollamaTransport{next: transport, key: key}}), nil
}

// ollamaError is ollamaClassify's error, for the calls that are not
// retried.
func (b *OpenAI) ollamaError(err error, rec *capture, model string) *APIError {
	return b.ollamaClassify(err, rec, model).api
}

// ollamaClassify turns an error of the official client into an *APIError
// and says whether it is transient, as classify does for openai-go:
//
//	api.StatusError          the server's status and its {"error": ...}
//	api.AuthorizationError   401
//	a JSON error             a line that is not an Ollama response
//	any other, after a 200   an {"error": ...} line in the stream
//	any other                no answer: the address and the cause
func (b *OpenAI) ollamaClassify(err error, rec *capture, model string) *attemptError {
	if rec == nil {
		rec = &capture{}
	}
	e := &attemptError{retryAfter: -1, api: &APIError{Backend: b.cfg.Name}}
	var se api.StatusError
	var ae api.AuthorizationError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var ue *url.Error
	switch {
	case errors.As(err, &se):
		e.api.Status = se.StatusCode
		e.api.Message = clip(strings.TrimSpace(se.ErrorMessage), 1000)
		if e.api.Message == "" {
			e.api.Message = http.StatusText(se.StatusCode)
		}
		if (serverError{message: e.api.Message}).overflow() {
			e.api.Err = ErrContextOverflow
			return e
		}
		if se.StatusCode == http.StatusNotFound && model != "" {
			e.api.Message += fmt.Sprintf(" (Ollama at %s; `ollama pull %s` there fetches it, `ollie read models` lists what it has)", b.root, model)
		}
		e.transient = transientStatus(se.StatusCode)
		e.retryAfter = parseRetryAfter(rec.header, b.now())
	case errors.As(err, &ae):
		e.api.Status = http.StatusUnauthorized
		e.api.Message = "unauthorized: Ollama at " + b.root + " refused the request"
		if b.cfg.KeyEnv != "" {
			e.api.Message += " with the key in " + b.cfg.KeyEnv
		}
	case errors.As(err, &syn), errors.As(err, &typ):
		e.api.Status = rec.status
		e.api.Message = "the server sent a line that is not an Ollama response: " + err.Error()
		e.api.Err = err
	case errors.As(err, &ue) || rec.status == 0:
		e.api.Message = fmt.Sprintf("Ollama at %s does not answer (%v): is it running? OLLAMA_HOST, or the backend's url, says where ollie looks", b.root, unwrapURL(err))
		e.api.Err = err
		e.transient = transientNet(err)
	default:
		// An {"error": ...} line after a 200, or a line that is not JSON.
		e.api.Message = clip(err.Error(), 1000)
		if (serverError{message: e.api.Message}).overflow() {
			e.api.Err = ErrContextOverflow
		}
	}
	return e
}

// unwrapURL drops the method and URL that url.Error adds: the message
// names the server already.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
