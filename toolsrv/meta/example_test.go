package meta_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"

	"ollie/toolsrv/meta"
)

// host is a made-up machine: the binaries in bins are in /usr/bin, the
// files in files exist, and it runs linux/amd64 with no environment.
type host struct {
	bins, files []string
}

func (h host) LookPath(file string) (string, error) {
	for _, b := range h.bins {
		if b == file {
			return "/usr/bin/" + file, nil
		}
	}
	return "", errors.New("not found")
}

func (h host) Stat(name string) (fs.FileInfo, error) {
	for _, f := range h.files {
		if f == name {
			return nil, nil // a condition asks only whether it exists
		}
	}
	return nil, fs.ErrNotExist
}

func (host) Getenv(key string) string { return "" }
func (host) GOOS() string             { return "linux" }
func (host) GOARCH() string           { return "amd64" }

// systemLogs is a .meta with two variants: journald where journalctl is in
// PATH, else syslog where /var/log/syslog exists. The top level gives what
// both share.
const systemLogs = `{
  "description": "Read system logs.",
  "readOnly": true,
  "timeout": 30,
  "variants": [
    {
      "match": {"binary": "journalctl"},
      "description": "Read system logs (journald).",
      "cmd": "system_logs_journald",
      "args": {
        "type": "object",
        "properties": {
          "unit": {"type": "string"},
          "lines": {"type": "integer", "minimum": 1}
        },
        "additionalProperties": false
      }
    },
    {
      "match": {"file": "/var/log/syslog", "os": "linux"},
      "description": "Read system logs (syslog).",
      "cmd": "system_logs_syslog"
    }
  ]
}`

// A .meta parsed, its variants' conditions checked on two made-up hosts,
// and the definition each host gets: the first variant whose match holds,
// merged over the top level.
func ExampleParse() {
	m, err := meta.Parse("tools/system_logs.meta", []byte(systemLogs))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tool:", m.Name)
	for _, h := range []struct {
		name string
		host meta.Host
	}{
		{"debian", host{bins: []string{"journalctl"}}},
		{"devuan", host{files: []string{"/var/log/syslog"}}},
	} {
		for i, v := range m.Variants {
			held := true
			for _, c := range v.Match {
				ck := c.On(h.host)
				fmt.Printf("%s: variants[%d]: %s\n", h.name, i, ck.Detail)
				held = held && ck.OK
			}
			if !held {
				continue
			}
			f := meta.Merge(m.Fields, v.Fields)
			fmt.Printf("%s: picks variants[%d]: %q, cmd %s, readOnly %v, timeout %v, args declared %v\n",
				h.name, i, *f.Description, *f.Cmd, *f.ReadOnly, *f.Timeout, f.Args != nil)
			break
		}
	}
	fmt.Println("default timeout:", meta.DefaultTimeout)
	// Output:
	// tool: system_logs
	// debian: variants[0]: binary "journalctl" found at /usr/bin/journalctl
	// debian: picks variants[0]: "Read system logs (journald).", cmd system_logs_journald, readOnly true, timeout 30s, args declared true
	// devuan: variants[0]: binary "journalctl" not found in PATH
	// devuan: variants[1]: file "/var/log/syslog" exists
	// devuan: variants[1]: os is "linux"
	// devuan: picks variants[1]: "Read system logs (syslog).", cmd system_logs_syslog, readOnly true, timeout 30s, args declared false
	// default timeout: 2m0s
}

// A call's arguments checked against the args schema the .meta declares:
// each problem names the argument, in words meant for the model.
func ExampleArgProblems() {
	m, err := meta.Parse("tools/system_logs.meta", []byte(systemLogs))
	if err != nil {
		log.Fatal(err)
	}
	sch := m.Variants[0].ArgsSchema()
	for _, args := range []string{
		`{"unit": "sshd", "lines": 50}`,
		`{"unit": "sshd", "lines": 0, "grep": "error"}`,
		`["sshd"]`,
	} {
		probs := meta.ArgProblems(sch, json.RawMessage(args))
		fmt.Println(args)
		if len(probs) == 0 {
			fmt.Println("  ok")
		}
		for _, p := range probs {
			fmt.Println("  " + p)
		}
	}
	// Output:
	// {"unit": "sshd", "lines": 50}
	//   ok
	// {"unit": "sshd", "lines": 0, "grep": "error"}
	//   unknown argument "grep"
	//   argument "lines": minimum: got 0, want 1
	// ["sshd"]
	//   arguments must be a JSON object, got an array
}

// A .meta with mistakes: every problem at once, each naming the file and
// the field as a JSON path.
func ExampleParse_errors() {
	_, err := meta.Parse("tools/system_logs.meta", []byte(`{
  "description": "Read system logs.",
  "timeout": "30",
  "variants": [{"match": {"bin": "journalctl"}}]
}`))
	fmt.Println(err)
	// Output:
	// tools/system_logs.meta: timeout: expected a whole number of seconds, 0 for none, got a string
	// tools/system_logs.meta: variants[0].match: unknown key "bin" (expected binary, file, os, arch, env, nenv)
}
