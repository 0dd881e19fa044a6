//go:build !linux

package sandbox

import "errors"

const poolSupported = false

func startWarm() (*warmHelper, error) {
	return nil, errors.New("sandbox: pre-started helpers run on Linux only")
}

func (h *warmHelper) alive() bool { return false }
