package main

// olliesrv's configuration file, ~/.config/ollie/olliesrv.yaml: what a
// daemon started by "olliesrv start" (ollie -start, ollie-remote up)
// serves besides its socket, where no flag can be given.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"gopkg.in/yaml.v3"

	"ollie/internal/paths"
)

// ConfigFile is the file's name in ollie's configuration directory.
const ConfigFile = "olliesrv.yaml"

// Config is olliesrv.yaml. A flag given on the command line wins over
// its entry.
type Config struct {
	// SSH is the appliance listener's TCP address, as -ssh.
	SSH string `yaml:"ssh"`
}

// loadConfig reads olliesrv.yaml; a missing file is the zero Config.
// Unknown fields and a second document are errors naming the file.
func loadConfig() (Config, string, error) {
	var c Config
	file, ok := paths.UserDir(ConfigFile)
	if !ok {
		return c, "", nil
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return c, file, nil
	}
	if err != nil {
		return c, file, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, file, fmt.Errorf("%s: %w", file, err)
	}
	var extra any
	if dec.Decode(&extra) == nil {
		return c, file, fmt.Errorf("%s: more than one YAML document", file)
	}
	return c, file, nil
}
