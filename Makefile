# The two set-up commands (see README.md): `make demo` and `make test`.
GO ?= go

.PHONY: demo test docs race check bench bench-ruby fuzz rubyspec loadtest mcp-conformance mcp-conformance-client fault gem gem-test

# The main job end to end: the scripted support-desk session (customer
# questions, the Ruby a model writes, the tool calls, the result JSON and
# the answer) on a freshly generated SQLite database; then the small
# sample programs in examples/, escape attempts included; then one program
# using two real MCP servers (filesystem and memory) in one eval; then an
# eval paused for approval in one process and approved in another.
demo:
	@echo "make demo: building (a first build with an empty Go cache compiles the cgo wasmtime bindings and takes minutes, silently; then glovebox shows its own progress)..."
	$(GO) build ./examples/supportdesk ./examples/demo
	$(GO) run ./examples/supportdesk
	$(GO) run ./examples/mcp
	$(GO) run ./examples/demo examples/*.rb
	$(GO) run ./examples/approval

# The full test suite, against the real engine. The first run fetches the
# Ruby image with npm and compiles it (one to two minutes on 2 cores);
# `setup` does that first, with progress on stderr (go test hides the
# output of passing tests). Later runs reuse the on-disk cache. The tests
# run through internal/testsum: go test's own output and exit code, then,
# on stderr, the tests that skipped, grouped by reason, with what to
# install to run them (bubblewrap, runsc, Node.js: README, Prerequisites).
# TESTARGS replaces the go test arguments.
TESTARGS ?= -count=1 -timeout 20m ./...
test:
	@echo "make test: building glovebox (silent; minutes on a first build), then its one-time setup..."
	$(GO) run ./cmd/glovebox setup
	@d=$$(mktemp -d) && $(GO) build -o $$d/testsum ./internal/testsum && \
	GO=$(GO) $$d/testsum $(TESTARGS); rc=$$?; rm -rf $$d; exit $$rc

# The guides' code as written (internal/doccheck): every Go block of
# README.md and docs/ checked against the compiled file it quotes or
# compiled as pasted in a module beside the checkout; every shell block
# run, in order per guide, in a directory of its own, against the
# glovebox built from the checkout, with a timeout and the exit status
# its comments name; servers started and stopped. Ends with the counts
# and each skipped block's reason (a service absent here). About a minute
# and a half on 2 cores once the build cache is warm; the first run also
# builds the README's copy of the checkout.
docs:
	GLOVEBOX_DOCS=1 $(GO) test -count=1 -v -timeout 20m -run '^TestGuidesRun$$' ./internal/doccheck

# The concurrency-sensitive tests under the race detector (slow).
race:
	$(GO) test -race -count=1 -run 'Concurrent|Tool|Hooks|Canceled|Transcript|Session|Rewind|Suspend|State' .
	$(GO) test -race -count=1 -run 'Rewind|Rewound|Pool|Session' ./internal/engine
	$(GO) test -race -count=1 ./httptool ./codemode/... ./examples/supportdesk/... ./mcptools

check:
	@test -z "$$(gofmt -l .)" || (gofmt -l . && false)
	$(GO) vet ./...
	$(GO) mod tidy -diff

bench:
	$(GO) run ./cmd/glovebox bench

# The executor's rows of `glovebox bench` alone: runs/s and evals/s through
# an executor on loopback with 1, 2 and 4 workers (and on PostgreSQL), p50/p99, beside the same
# work in-process (bounded: under a minute on 2 cores).
loadtest:
	GLOVEBOX_LOADTEST=1 $(GO) test -count=1 -v -run 'TestLoadExecutor|TestLoadFleetSession' ./internal/bench

# The executor fleet's fault tests: two real executor processes on one real
# PostgreSQL while clients work on sessions, paused approvals, sessions
# paused in approvals and plain evals, four clients racing each key through
# both executors (200 clients on 50 keys, the issue's figure; the rolling
# restart runs half of them):
# kill -9 of one executor, a PostgreSQL restart, a rolling restart of both;
# each counts every tool call on the host (nothing completed lost, nothing
# run twice). About a minute on 2 cores (48-78 s for the three over seven
# runs with other work on the machine); FAULT_CLIENTS sets the clients (200).
FAULT_CLIENTS ?= 200
fault:
	GLOVEBOX_FAULT=1 GLOVEBOX_FAULT_CLIENTS=$(FAULT_CLIENTS) $(GO) test -count=1 -v -timeout 20m -run '^TestFault' ./executor

# The Ruby gem's benchmark, each figure beside its baseline in one run: an
# eval with one tool call from Ruby embedded beside Go in-process and both
# through a local executor; a new Ruby process to its first result; evals/s
# from 1, 2 and 4 threads (ruby/bench/bench.rb).
bench-ruby:
	@d=$$(mktemp -d) && $(GO) build -o $$d/glovebox ./cmd/glovebox && \
	cd ruby && GLOVEBOX_BIN=$$d/glovebox ruby -Ilib bench/bench.rb; rc=$$?; rm -rf $$d; exit $$rc

# The installable artifacts (internal/release): the Ruby gem for
# x86_64-linux and aarch64-linux, each packing the glovebox binary for
# its platform (cgo, static; arm64 cross-compiled with
# gcc-aarch64-linux-gnu), the pinned Ruby image and that image compiled
# for the platform by the binary itself (the arm64 one under
# qemu-aarch64-static), plus the plain gem, in ruby/pkg/; the release
# archives glovebox-VERSION-linux-{amd64,arm64}.tar.gz in dist/; a
# SHA256SUMS in each. Needs Go, gcc, gcc-aarch64-linux-gnu,
# qemu-user-static, Ruby's gem command, and npm unless the image is
# cached. A few minutes warm (the compiled modules are kept in the
# glovebox cache's release/ directory); tens of minutes cold.
gem:
	$(GO) run ./internal/release

# The platform gem as a user gets it: installs ruby/pkg's x86_64-linux gem
# into an empty GEM_HOME with an empty HOME (no glovebox cache) and a PATH
# holding Ruby alone (no Go, npm or glovebox), then runs glovebox through
# the gem (setup, eval, Glovebox.setup) and ruby/examples/first.rb and
# rails.rb end to end; checks the aarch64 gem's binary is aarch64 and runs
# its `version` under qemu-user when qemu-aarch64-static is installed.
# The first example runs first, timed, and must use the compiled modules
# the gem ships (no compile in the empty HOME).
gem-test: gem
	ruby/test/installed_gem.sh

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./internal/wire
	$(GO) test -run '^$$' -fuzz FuzzURL -fuzztime 60s ./httptool
	$(GO) test -run '^$$' -fuzz FuzzHeader -fuzztime 60s ./httptool
	$(GO) test -run '^$$' -fuzz FuzzHandle -fuzztime 60s ./codemode
	$(GO) test -run '^$$' -fuzz FuzzEscapeText -fuzztime 60s ./cmd/glovebox
	$(GO) test -run '^$$' -fuzz FuzzReadFrame -fuzztime 60s ./box/internal/sbx
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 60s ./executor/internal/wire
	$(GO) test -run '^$$' -fuzz FuzzDecodeEvalRequest -fuzztime 60s ./executor/internal/wire
	$(GO) test -run '^$$' -fuzz FuzzDecodeReply -fuzztime 60s ./executor
	$(GO) test -run '^$$' -fuzz FuzzOpenState -fuzztime 60s .
	$(GO) test -run '^$$' -fuzz FuzzSessionState -fuzztime 60s ./internal/engine

# ruby/spec conformance (README, "Conformance"): core, language and library
# run inside glovebox and on the baseline (the same image under wasmtime's
# own WASI), a table per directory; fails when glovebox fails an example
# the baseline passes that conformance/accepted-differences.txt does not
# list. The suite comes from $GLOVEBOX_RUBYSPEC or ../shared/rubyspec
# (spec/ and mspec/); without it the target says how to get it and skips.
rubyspec:
	$(GO) run ./conformance

# The official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned in internal/npmtest, with Node 22+ from npm when the machine's is
# older) in server mode against `glovebox mcp --http`, with the scenarios
# MCP 2026-07-28 and 2025-11-25 require, then each scenario of the tasks
# extension; prints the suite's summaries and fails on any failure not in
# mcpserver/testdata/conformance/expected-failures-REVISION.yaml (or
# expected-failures-tasks.yaml). About a minute once installed.
mcp-conformance:
	$(GO) test -count=1 -v -run '^TestMCPConformance$$' ./cmd/glovebox
	$(MAKE) mcp-conformance-client

# The same suite in client mode against `glovebox eval --mcp-url` (the
# wrapper cmd/glovebox/testdata/conformance/client.rb; Ruby and curl), the
# OAuth scenarios included, at both revisions; fails on any failure not in
# cmd/glovebox/testdata/conformance/expected-failures-client-REVISION.yaml
# and on an access token in glovebox's output. About 40 s.
mcp-conformance-client:
	$(GO) test -count=1 -v -run '^TestMCPConformanceClient$$' ./cmd/glovebox
