package remote

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"ollie/agent/fakellm"
	"ollie/internal/sshlab"
)

// BenchmarkDesktopModel is the desktop's model as a host reaches it: time
// to the first token and tokens a second of a streamed reply, through the
// host's forwarded models socket (SSH, the keeper's proxy, the API key
// added) beside the same scripted server reached directly from the same
// host, with the same curl, in alternation. The ratios are tunnel/direct.
func BenchmarkDesktopModel(b *testing.B) {
	lab := sshlab.Start(b, sshlab.Config{Hosts: 1, UserPrefix: "ormbn"})
	r := newRemote(b, lab)
	r.must("deploy", "h11")
	llm := fakellm.Start(b)
	const tokens = 2000
	words := make([]string, tokens)
	for i := range words {
		words[i] = "tok "
	}
	llm.Respond(func(*fakellm.ChatRequest) fakellm.Response {
		return fakellm.Response{Text: words, Usage: &fakellm.Usage{PromptTokens: 10, CompletionTokens: tokens}}
	})
	deskCfg := desktopBackends(b, llm.URL, "DESK_KEY", "m")
	up := r.cmd("up", "-model-via", "desktop:deskllm", "h11")
	up.Env = append(up.Env, "XDG_CONFIG_HOME="+deskCfg, "DESK_KEY=sk-bench")
	if out, err := up.CombinedOutput(); err != nil {
		b.Fatalf("up: %v\n%s", err, out)
	}
	cfgFile, err := lab.SSH("h11", "cat", ".config/ollie/backends.desktop.json").Output()
	if err != nil {
		b.Fatal(err)
	}
	var desk struct {
		Backends map[string]struct{ Socket string } `json:"backends"`
	}
	json.Unmarshal(cfgFile, &desk)
	sock := desk.Backends["desktop"].Socket
	if sock == "" {
		b.Fatalf("no socket in the host's desktop backend:\n%s", cfgFile)
	}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}]}`
	curl := func(via ...string) string {
		return fmt.Sprintf("curl -sS -o /dev/null -w '%%{time_starttransfer} %%{time_total}\\n' -H 'Content-Type: application/json' -d '%s' %s", body, strings.Join(via, " "))
	}
	tunnel := curl("--unix-socket", sock, "http://desktop/v1/chat/completions")
	direct := curl(llm.URL + "/v1/chat/completions")
	// Measured on the host, n of each, in alternation.
	measure := func(n int) (tun, dir [][2]float64) {
		var script strings.Builder
		for range n {
			fmt.Fprintf(&script, "printf 't '; %s\nprintf 'd '; %s\n", tunnel, direct)
		}
		cmd := lab.SSH("h11", "sh", "-s")
		cmd.Stdin = strings.NewReader(script.String())
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("curl on the host: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			first, _ := strconv.ParseFloat(f[1], 64)
			total, _ := strconv.ParseFloat(f[2], 64)
			if f[0] == "t" {
				tun = append(tun, [2]float64{first, total})
			} else {
				dir = append(dir, [2]float64{first, total})
			}
		}
		return tun, dir
	}
	b.ResetTimer()
	tun, dir := measure(max(b.N, 1) * 10)
	b.StopTimer()
	median := func(xs [][2]float64, i int) float64 {
		v := make([]float64, len(xs))
		for k, x := range xs {
			v[k] = x[i]
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	rate := func(xs [][2]float64) float64 {
		return tokens / (median(xs, 1) - median(xs, 0))
	}
	b.ReportMetric(median(dir, 0)*1000, "direct-ttft-ms")
	b.ReportMetric(median(tun, 0)*1000, "tunnel-ttft-ms")
	b.ReportMetric(rate(dir), "direct-tok/s")
	b.ReportMetric(rate(tun), "tunnel-tok/s")
	b.ReportMetric(rate(tun)/rate(dir), "throughput-ratio")
	b.ReportMetric(median(tun, 0)/median(dir, 0), "ttft-ratio")
}
