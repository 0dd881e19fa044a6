package desktop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"ollie/broker"
	"ollie/internal/paths"
)

// DialogApprover asks with a zenity or kdialog window, for a desktop
// without an askpass, and announces each request with a desktop
// notification first, so that a dialog opening behind other windows is
// not missed.
//
// The elevation gate has three buttons: "Approve once", "Always (TOOL on
// HOST)" and "Deny"; closing the window denies. The credential gate is a
// hidden-text entry whose answer is read as an askpass's is.
type DialogApprover struct {
	// Program is the zenity or kdialog to run (a path or a name in PATH);
	// its base name says which of the two it is.
	Program string
	// Notifier, when not nil, announces each approval request. It is best
	// effort: without a session bus the dialog still opens.
	Notifier *Notifier
}

// FindDialog returns the dialog program to use when a display is there:
// kdialog on KDE, zenity elsewhere, either when only one is installed, or
// "" when neither is or there is no display.
func FindDialog() string {
	if !haveDisplay() {
		return ""
	}
	order := []string{"zenity", "kdialog"}
	if strings.Contains(strings.ToUpper(os.Getenv("XDG_CURRENT_DESKTOP")), "KDE") {
		order = []string{"kdialog", "zenity"}
	}
	for _, name := range order {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func (d *DialogApprover) kind() (string, error) {
	switch k := programName(d.Program); {
	case strings.HasPrefix(k, "zenity"):
		return "zenity", nil
	case strings.HasPrefix(k, "kdialog"):
		return "kdialog", nil
	default:
		return "", fmt.Errorf("broker: dialog program %q is neither zenity nor kdialog", d.Program)
	}
}

// dialogTitle names the host the request came over, from the SSH
// connection: the window's title is a place the host's own text never
// reaches.
func dialogTitle(req *broker.Request) string { return "ollie: request from " + req.HostName() }

func alwaysLabel(req *broker.Request) string {
	return fmt.Sprintf("Always (%s on %s)", req.ToolName(), req.HostName())
}

// gtkButton quotes a label that GTK parses for a mnemonic (zenity's
// --ok-label, --cancel-label and --extra-button), so that "_" is shown,
// not taken as the next letter's underline: "bars_zen" showed "barszen".
// Text GTK shows as it is (--text with --no-markup, --title) is left alone.
func gtkButton(s string) string { return strings.ReplaceAll(s, "_", "__") }

// qtButton quotes a label that Qt parses for an accelerator (kdialog's
// --yes-label, --no-label and --cancel-label): "&" marks one.
func qtButton(s string) string { return strings.ReplaceAll(s, "&", "&&") }

// Approve notifies, then shows the three-button question.
func (d *DialogApprover) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	kind, err := d.kind()
	if err != nil {
		return broker.Answer{}, err
	}
	if d.Notifier != nil {
		id, err := d.Notifier.Notify(ctx, notifySummary(req), req.Prompt())
		if err == nil {
			defer d.Notifier.Close(context.WithoutCancel(ctx), id)
		}
	}
	always := alwaysLabel(req)
	var args []string
	switch kind {
	case "zenity":
		// --no-markup: the request's text is shown as it is, not as
		// Pango markup a tool's arguments could forge.
		args = []string{"--question", "--title", dialogTitle(req), "--no-markup", "--width", "640",
			"--text", req.Prompt(),
			"--ok-label", gtkButton("Approve once"), "--cancel-label", gtkButton("Deny"), "--extra-button", gtkButton(always)}
	case "kdialog":
		args = []string{"--title", dialogTitle(req),
			"--warningyesnocancel", qtPlain(req.Prompt()),
			"--yes-label", qtButton("Approve once"), "--no-label", qtButton(always), "--cancel-label", qtButton("Deny")}
	}
	res, err := runHelper(ctx, d.Program, args, "")
	if err != nil {
		return broker.Answer{}, err
	}
	defer broker.Zero(res.out)
	switch kind {
	case "zenity":
		// OK exits 0; the extra button prints its label as given (the
		// quoted one) and exits 1; Cancel, closing the window and a
		// timeout exit non-zero.
		switch out := string(trimNewline(res.out)); {
		case res.code == 0:
			return broker.Answer{Decision: broker.Once}, nil
		case out == gtkButton(always) || out == always:
			return broker.Answer{Decision: broker.Always}, nil
		}
	case "kdialog":
		// Yes 0, No 1, Cancel (and closing the window) 2; 254 is a usage
		// error.
		switch res.code {
		case 0:
			return broker.Answer{Decision: broker.Once}, nil
		case 1:
			return broker.Answer{Decision: broker.Always}, nil
		case 2:
		default:
			return broker.Answer{}, fmt.Errorf("broker: %s exited with status %d%s", d.Program, res.code, stderrSuffix(res.stderr))
		}
	}
	return broker.Answer{Decision: broker.Deny, Reason: deniedByPerson}, nil
}

// Password shows a hidden-text entry.
func (d *DialogApprover) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	kind, err := d.kind()
	if err != nil {
		return nil, err
	}
	prompt := req.PasswordPrompt(attempt, problem)
	var args []string
	switch kind {
	case "zenity":
		args = []string{"--entry", "--hide-text", "--title", dialogTitle(req), "--text", zenityEntryText(prompt)}
	case "kdialog":
		args = []string{"--title", dialogTitle(req), "--password", qtPlain(prompt)}
	}
	res, err := runHelper(ctx, d.Program, args, "")
	if err != nil {
		return nil, err
	}
	if res.code != 0 {
		broker.Zero(res.out)
		return nil, fmt.Errorf("broker: the password dialog (%s) was cancelled: %w", programName(d.Program), broker.ErrDenied)
	}
	return trimNewline(res.out), nil
}

func (d *DialogApprover) String() string {
	s := "dialog " + d.Program
	if d.Notifier != nil {
		s += " with desktop notifications"
	}
	return s
}

// zenityEntryText quotes text for zenity's entry label, which expands C
// escapes (g_strcompress) and takes "_" as a keyboard mnemonic.
func zenityEntryText(s string) string {
	return strings.NewReplacer(`\`, `\\`, "_", "__").Replace(s)
}

// qtPlain makes text safe for a Qt label that guesses rich text: escaped
// and wrapped so that it is always rich text, shown as written.
func qtPlain(s string) string {
	return "<qt><pre>" + markupEscaper.Replace(strings.TrimRight(s, "\n")) + "</pre></qt>"
}

// markupEscaper escapes what makes text markup, and nothing more: quotes
// are left alone, as not every notification server knows their entities.
var markupEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func notifySummary(req *broker.Request) string {
	if req.Yolo {
		return fmt.Sprintf("ollie: %s asks to create a yolo session (tools unsandboxed, without approval)", req.HostName())
	}
	if req.Sudo {
		return fmt.Sprintf("ollie: %s asks to run %s as root", req.HostName(), req.ToolName())
	}
	return fmt.Sprintf("ollie: %s asks to run %s outside its sandbox", req.HostName(), req.ToolName())
}

// Notifier sends desktop notifications over the session bus
// (org.freedesktop.Notifications). It never starts a bus: with none
// running, Notify fails at once.
type Notifier struct {
	// Address is the session bus's D-Bus address; "" means
	// DBUS_SESSION_BUS_ADDRESS, or else $XDG_RUNTIME_DIR/bus.
	Address string
	// Timeout bounds each call, so that a bus that does not answer
	// does not hold up the dialog; 0 means 2 seconds.
	Timeout time.Duration
}

// ErrNoSessionBus is returned by Notify when no session bus address is
// known.
var ErrNoSessionBus = errors.New("broker: no D-Bus session bus")

const (
	notifyDest  = "org.freedesktop.Notifications"
	notifyPath  = "/org/freedesktop/Notifications"
	notifyIface = "org.freedesktop.Notifications"
)

func (n *Notifier) address() string {
	if n.Address != "" {
		return n.Address
	}
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
		return a
	}
	if dir := paths.XDG("XDG_RUNTIME_DIR"); dir != "" {
		p := filepath.Join(dir, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix:path=" + p
		}
	}
	return ""
}

func (n *Notifier) call(ctx context.Context, method string, args ...any) (*dbus.Call, error) {
	addr := n.address()
	if addr == "" {
		return nil, ErrNoSessionBus
	}
	timeout := n.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("broker: session bus %s: %w", addr, err)
	}
	defer conn.Close()
	c := conn.Object(notifyDest, notifyPath).CallWithContext(ctx, notifyIface+"."+method, 0, args...)
	if c.Err != nil {
		return nil, fmt.Errorf("broker: %s.%s: %w", notifyIface, method, c.Err)
	}
	return c, nil
}

// Notify shows a notification and returns its id.
func (n *Notifier) Notify(ctx context.Context, summary, body string) (uint32, error) {
	hints := map[string]dbus.Variant{"urgency": dbus.MakeVariant(byte(2))} // critical: it waits for an answer
	// Servers may read the body as markup.
	c, err := n.call(ctx, "Notify", "ollie", uint32(0), "dialog-password", summary,
		markupEscaper.Replace(body), []string{}, hints, int32(-1))
	if err != nil {
		return 0, err
	}
	var id uint32
	if err := c.Store(&id); err != nil {
		return 0, fmt.Errorf("broker: Notify's answer: %w", err)
	}
	return id, nil
}

// Close takes a notification away once its request is answered.
func (n *Notifier) Close(ctx context.Context, id uint32) error {
	_, err := n.call(ctx, "CloseNotification", id)
	return err
}
