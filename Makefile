# ollie: one static binary (olliesrv, also "ollie" by name) plus data/.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
PLATFORMS := linux/amd64 linux/arm64
FUZZTIME ?= 12000x

.PHONY: build cross test fuzz bench run clean FORCE

build: bin/olliesrv bin/ollie bin/ollie-remote

bin/olliesrv: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/olliesrv

bin/ollie-remote: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/ollie-remote

# busybox style: the same file, chosen by its name
bin/ollie: bin/olliesrv
	ln -sf olliesrv $@

# static binaries for every host platform ollie-remote deploys to
cross:
	@for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		echo "build bin/$$os-$$arch/olliesrv"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
			-o bin/$$os-$$arch/olliesrv ./cmd/olliesrv || exit 1; \
	done

# The whole suite: vet, every test with the race detector, then a short
# fuzzing run of the 9P message handling. OLLIE_LAB=1 makes it the lab
# tier (internal/lab): a test that needs root, sshd or sudo fails when one
# is missing, where plain go test skips it.
# GORACE=atexit_sleep_ms=0: a race-detector binary sleeps a second as it
# exits (to let late reports print), and the tests start thousands of them
# (toolsrv's children, sandbox helpers, which pass GORACE on); a race is
# still reported when it happens, and fails the test it happens in.
test:
	$(GO) vet ./...
	OLLIE_LAB=1 CGO_ENABLED=1 GORACE=atexit_sleep_ms=0 $(GO) test -race -count=1 -parallel 4 -timeout 25m ./...
	$(MAKE) fuzz

# Each target gets FUZZTIME (the two share what FuzzServe alone had). It
# counts execs (about 10 s each here), not seconds: Go 1.26's fuzzing
# coordinator can fail a run at the end of a timed -fuzztime with "context
# deadline exceeded" and no failing input (golang/go#75804, fixed in 1.27),
# which a loaded machine made happen in make test. A
# new input's minimisation is capped: uncapped it takes seconds of runs
# that count for nothing, the fuzzer stalling at 0 execs/s meanwhile.
fuzz:
	$(GO) test ./ns -run '^$$' -fuzz '^FuzzServe$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./ns -run '^$$' -fuzz '^FuzzPrincipals$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./internal/termsafe -run '^$$' -fuzz '^FuzzLine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./tunnel/mux -run '^$$' -fuzz '^FuzzClient$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./ns/client -run '^$$' -fuzz '^FuzzServerReplies$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./broker -run '^$$' -fuzz '^FuzzConverse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./ns/words -run '^$$' -fuzz '^FuzzQuote$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x
	$(GO) test ./ns/ninep -run '^$$' -fuzz '^FuzzReadMessage$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x

# Every benchmark, each beside its peer (raw socket, bare exec, bare HTTP,
# parallel-ssh, ansible); figures and their commands are in
# docs/benchmarks.md. The fleet's take minutes on two cores: hence the
# timeout.
bench:
	CGO_ENABLED=0 $(GO) test ./ns ./chat ./toolsrv ./toolsrv/sandbox ./agent ./agent/backend ./agent/store ./e2e/remote ./e2e/olliesrv -run '^$$' -bench . -benchtime 2s -timeout 60m

# Start a local olliesrv (or reuse the running one) and show its namespace.
run: build
	scripts/demo.sh

# ollie-remote end to end with no remote host and no root: three SSH hosts
# inside one process, a deploy, tunnels, an agent (a real model if OLLAMA_HOST
# or OPENAI_API_KEY is set, else a scripted one), then everything removed.
.PHONY: demo
demo: build
	bin/ollie-remote demo

clean:
	rm -rf bin
