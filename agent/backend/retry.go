package backend

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// Retry rules for Chat. A transient failure (HTTP 408, 429, 5xx but 501;
// a connection refused, reset or cut short; a stream that ends before its
// finish reason) is retried up to MaxRetries times, so a request is sent
// at most MaxRetries+1 times. The wait before retry n (0-based) is the
// server's Retry-After (retry-after-ms, or Retry-After in seconds or as an
// HTTP date) if it sent one, else BaseBackoff<<n. A Retry-After longer
// than MaxRetryAfter is not waited for: the error is returned at once.
// A context overflow and every other failure are never retried.
const (
	MaxRetries    = 3
	BaseBackoff   = time.Second
	MaxRetryAfter = time.Minute
)

// attemptError is one failed attempt.
type attemptError struct {
	api        *APIError
	transient  bool
	retryAfter time.Duration // from the server; -1 when it sent none
}

// retryAfter says how long to wait before retrying after attempt (0-based)
// failed, and whether to retry at all.
func (b *OpenAI) retryAfter(e *attemptError, attempt int) (time.Duration, bool) {
	if !e.transient || attempt >= MaxRetries {
		return 0, false
	}
	if e.retryAfter >= 0 {
		if e.retryAfter > MaxRetryAfter {
			e.api.Message += fmt.Sprintf(" (the server asks to wait %s before retrying)", e.retryAfter.Round(time.Second))
			return 0, false
		}
		return e.retryAfter, true
	}
	return BaseBackoff << attempt, true
}

// classify turns a failed attempt's error into an *APIError and says
// whether it is transient. rec holds what the middleware saw.
func (b *OpenAI) classify(err error, rec *capture) *attemptError {
	e := &attemptError{retryAfter: -1, api: &APIError{Backend: b.cfg.Name, Status: rec.status}}
	var serr *ssestream.StreamError
	switch {
	case rec.status >= 400:
		se := parseErrorBody(rec.body)
		e.api.Message = se.message
		if e.api.Message == "" {
			e.api.Message = http.StatusText(rec.status)
		}
		if se.overflow() {
			e.api.Err = ErrContextOverflow
			return e
		}
		e.transient = transientStatus(rec.status)
		e.retryAfter = parseRetryAfter(rec.header, b.now())
	case errors.As(err, &serr):
		// An error event after the headers: the status said 200.
		se := parseErrorBody(serr.Event.Data)
		e.api.Message = se.message
		if e.api.Message == "" {
			e.api.Message = serr.Message
		}
		e.api.Status = se.status // the body's code, if any
		if se.overflow() {
			e.api.Err = ErrContextOverflow
			return e
		}
		e.transient = transientStatus(se.status)
	default:
		// No answer, or one cut short: the status, if any, said nothing.
		e.api.Status = 0
		e.api.Message = err.Error()
		e.api.Err = err
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		if errors.As(err, &syn) || errors.As(err, &typ) {
			e.api.Message = "the server streamed a chunk that is not a chat completion chunk: " + err.Error()
		}
		e.transient = transientNet(err)
	}
	return e
}

func (b *OpenAI) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

func transientStatus(s int) bool {
	return s == http.StatusRequestTimeout || s == http.StatusTooManyRequests ||
		s >= 500 && s <= 599 && s != http.StatusNotImplemented && s != http.StatusHTTPVersionNotSupported
}

// transientNet reports whether a request that got no (whole) answer is
// worth sending again: the server refused, reset or cut the connection, or
// it timed out. A bad certificate or an unknown host is not.
func transientNet(err error) bool {
	var cert x509.CertificateInvalidError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var dns *net.DNSError
	var gone *notConnected
	switch {
	case errors.As(err, &cert), errors.As(err, &unknown), errors.As(err, &host):
		return false
	case errors.As(err, &gone):
		return true
	case errors.As(err, &dns):
		return dns.IsTemporary || dns.IsTimeout
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// parseRetryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds
// or an HTTP date); -1 means the server gave none.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return -1
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 {
			return -1
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}

// serverError is what an error body says, however the server shaped it.
type serverError struct {
	message, code, typ string
	status             int // a numeric code in the body (vLLM, OpenRouter)
}

// parseErrorBody reads the error bodies servers send:
//
//	{"error": {"message": "...", "type": "...", "code": "..." or 400}}  OpenAI, llama.cpp, Ollama /v1, OpenRouter
//	{"object": "error", "message": "...", "code": 400}                 vLLM
//	{"error": "..."}                                                    Ollama's own API
//	{"detail": "..."}                                                   FastAPI servers
//	anything else                                                       the text itself
func parseErrorBody(body []byte) serverError {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
	}
	if json.Unmarshal(body, &top) != nil {
		return serverError{message: clip(strings.TrimSpace(string(body)), 1000)}
	}
	var se serverError
	var nested struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
	}
	var text string
	switch {
	case json.Unmarshal(top.Error, &text) == nil:
		se.message = text
	case json.Unmarshal(top.Error, &nested) == nil && top.Error != nil:
		se.message, se.typ = nested.Message, nested.Type
		se.code, se.status = codeOf(nested.Code)
	default:
		se.message, se.typ = top.Message, top.Type
		se.code, se.status = codeOf(top.Code)
		if se.message == "" && json.Unmarshal(top.Detail, &text) == nil {
			se.message = text
		}
	}
	if se.message == "" {
		se.message = clip(strings.TrimSpace(string(body)), 1000)
	}
	return se
}

func codeOf(raw json.RawMessage) (string, int) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, 0
	}
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return "", n
	}
	return "", 0
}

// overflowPhrases are how servers say a request does not fit the context
// window. Matching text is a last resort, but only OpenAI and llama.cpp
// send a code for it; the phrases are lower case.
var overflowPhrases = []string{
	"maximum context length",                  // OpenAI, vLLM, OpenRouter, DeepSeek
	"context_length_exceeded",                 // in messages of proxies that relay OpenAI's code
	"context length exceeded",                 // LiteLLM, several proxies
	"exceeds the context length",              // Ollama
	"exceeds the available context size",      // llama.cpp
	"exceed_context_size",                     // llama.cpp's type, relayed
	"input is too large to process",           // older llama.cpp
	"exceeds the context window",              // Anthropic-compatible, Mistral
	"context window exceeded",                 // proxies
	"prompt is too long",                      // Anthropic-compatible
	"`inputs` tokens + `max_new_tokens` must", // TGI, Together
	"reduce the length of the messages",       // OpenAI's older wording
}

func (se serverError) overflow() bool {
	if se.code == "context_length_exceeded" || se.typ == "exceed_context_size_error" {
		return true
	}
	m := strings.ToLower(se.message)
	for _, p := range overflowPhrases {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}
