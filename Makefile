# Vigil. `make` (or `make help`) lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

# staticcheck 2026.2.2: the latest release (checked with
# `go list -m -versions honnef.co/go/tools`); it runs on Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK         := $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

EXAMPLE_REDIS_URL := redis://127.0.0.1:6379/0

# Redocly CLI 2.x (npm) lints the OpenAPI documents (docs/design.md §7).
REDOCLY  ?= npx -y @redocly/cli@2
FUZZTIME ?= 20s

.PHONY: help docs run test test-redis test-failover chaos explore build lint openapi bench bench-short fuzz e2e dashboard-png vendor-uplot clean cgo-check redis-server-check

help: ## list the targets
	@printf 'Usage: make <target>\n\nTargets:\n'
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## run the demo: embedded Redis, three pools of demo workers
	$(GO) run ./cmd/vigil demo

# The suites wait on real time (leases, TTLs, child processes) far more
# than they compute: measured on 2 cores, `go test` used 0.5 of a core with
# its defaults (-p and -parallel = GOMAXPROCS = 2). TEST_P packages and
# TEST_PARALLEL parallel tests at a time (each test has its own Redis, or its
# own key prefix and queue names on a shared one) took make test from 155 s
# to 92 s and make test-redis (-p 1 before) from 266 s to 99 s.
TEST_P        ?= 3
TEST_PARALLEL ?= 6
TEST_FLAGS     = -race -count=1 -p $(TEST_P) -parallel $(TEST_PARALLEL)

test: cgo-check ## run the default test suite under -race (miniredis, no infrastructure)
	env -u VIGIL_TEST_REDIS_URL -u VIGIL_CHAOS $(GO) test $(TEST_FLAGS) ./...

# The packages whose tests change with a real Redis: those that take one
# from internal/testredis or read VIGIL_TEST_REDIS_URL. The others (and the
# explorer, the browser and failover suites, which start their own Redis)
# would only run again what make test ran.
REDIS_PKGS = $(shell grep -rlE 'testredis\.|VIGIL_TEST_REDIS_URL' --include='*_test.go' . | xargs -n1 dirname | sort -u | grep -vE '^\./(explore|e2e|failover)(/|$$)')

test-redis: cgo-check ## run the suite against a real Redis (needs VIGIL_TEST_REDIS_URL)
	@if [ -z "$${VIGIL_TEST_REDIS_URL:-}" ]; then \
		echo "make test-redis: VIGIL_TEST_REDIS_URL is not set; name a Redis the tests may write to, e.g." >&2; \
		echo "  VIGIL_TEST_REDIS_URL=$(EXAMPLE_REDIS_URL) make test-redis" >&2; \
		echo "(.ci/run starts a private redis-server and does this for you)" >&2; \
		exit 2; \
	fi
	@$(MAKE) redis-server-check
	@echo "test-redis: using $$VIGIL_TEST_REDIS_URL"
	VIGIL_TEST_REDIS_URL="$$VIGIL_TEST_REDIS_URL" env -u VIGIL_CHAOS $(GO) test $(TEST_FLAGS) $(REDIS_PKGS)

# The failover suite (failover/, RELIABILITY.md "Redis failover") starts
# real topologies from redis-server binaries on ports 6431-6459: a
# Sentinel (master, replica, sentinel) and a 6-node Cluster with replicas,
# two vigil hosts and a pool, and fails Redis over under a stream of jobs.
# VIGIL_FAILOVER_PORT_BASE=6500 moves those ports to 6500-6528 (two runs on
# one machine).
RUNS    ?= 1
ONLY    ?=
OUT     ?=
DURABLE ?= 0
test-failover: cgo-check ## the failover suite: Sentinel and Cluster-with-replicas failovers under load (RUNS=1 per scenario, ONLY=sentinel/kill,cluster,durable,sentinel-start,fault/ picks scenarios and tests (and skips the harness's own tests), OUT=file.jsonl keeps the figures, LOGS=dir keeps the hosts' logs, DURABLE=1 runs the hosts with durable_enqueue replicas 1; ~25 s a run)
	@$(MAKE) redis-server-check
	VIGIL_FAILOVER=1 VIGIL_FAILOVER_RUNS=$(RUNS) VIGIL_FAILOVER_ONLY=$(ONLY) VIGIL_FAILOVER_DURABLE=$(DURABLE) VIGIL_FAILOVER_OUT=$(abspath $(or $(OUT),/dev/null)) VIGIL_FAILOVER_LOGS=$(if $(LOGS),$(abspath $(LOGS))) \
		$(GO) test -race -count=1 -p 1 -timeout 90m -v $(if $(ONLY),,./internal/testtopo/) ./failover/ 2>&1 | \
		grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|RESULT|_test\.go:[0-9]+:'

# The chaos suite starts its own redis-server processes: it needs the
# binary, not VIGIL_TEST_REDIS_URL. RELIABILITY.md lists the scenarios.
chaos: cgo-check ## the chaos scenarios at full size (~10 min; VIGIL_CHAOS_OUTAGE=60s how long Redis stays down)
	@$(MAKE) redis-server-check
	@out=$$(mktemp /tmp/vigil-chaos.XXXXXX); echo "make chaos: the whole output goes to $$out"; \
	VIGIL_CHAOS=1 $(GO) test -race -count=1 -timeout 60m -v ./chaos/ 2>&1 | tee "$$out" | \
		grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|RESULT|_test\.go:[0-9]+:'

# The fault explorer (RELIABILITY.md, "Fault explorer") starts its own
# redis-server processes when REDIS is redis-server, sentinel, cluster or
# mixed (on free ports, or in PORTS=lo-hi). It replays
# explore/testdata/seeds.txt first and appends every new failing seed to it.
SEEDS  ?= 100
REDIS  ?= mixed
J      ?= 2
RECORD ?= 1
explore: cgo-check ## the fault explorer: random fault schedules, invariants checked (SEEDS=100, SEED=s replays one, BUDGET=10m, REDIS=miniredis|redis-server|sentinel|cluster|mixed, PORTS=lo-hi to start Redis servers in that range only, J=2 at a time, MINIMIZE=inv with SEED, RECORD=0 not to append failing seeds, START=s first new seed, RACE=0 hosts built without -race: about twice the seeds an hour)
	@$(MAKE) redis-server-check
	$(GO) run ./explore/cmd/explore -replay explore/testdata/seeds.txt $(if $(filter 1,$(RECORD)),-record) -redis $(REDIS) -j $(J) -seeds $(SEEDS) \
		$(if $(SEED),-seed $(SEED)) $(if $(BUDGET),-budget $(BUDGET)) $(if $(MINIMIZE),-minimize $(MINIMIZE)) $(if $(PORTS),-ports $(PORTS)) \
		$(if $(START),-start $(START)) $(if $(filter 0,$(RACE)),-race=false)

build: ## build bin/vigil, stamped with VERSION (git describe, else dev)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/vigil ./cmd/vigil

lint: ## go vet, gofmt, staticcheck and the OpenAPI lint (Redocly, if npx is here)
	$(GO) vet ./...
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (gofmt -w):" >&2; \
		echo "$$unformatted" >&2; \
		exit 1; \
	fi
	@if $(STATICCHECK) -version >/dev/null 2>&1; then \
		echo "$(STATICCHECK) ./..."; \
		$(STATICCHECK) ./...; \
	else \
		echo "lint: skipping staticcheck: honnef.co/go/tools@$(STATICCHECK_VERSION) does not build here (offline, or not for this Go)" >&2; \
	fi
	@if command -v npx >/dev/null 2>&1; then \
		echo "$(REDOCLY) lint openapi/openapi.yaml openapi/openapi-3.0.yaml"; \
		$(REDOCLY) lint openapi/openapi.yaml openapi/openapi-3.0.yaml; \
	else \
		echo "lint: skipping the OpenAPI lint: npx (Node.js) is not installed" >&2; \
	fi

docs: ## regenerate docs/config-reference.md (every setting) from the configuration's types
	$(GO) test -count=1 -run '^TestReferenceIsCurrent$$' ./config -update

openapi: ## regenerate openapi/ (3.1 and 3.0 documents, Go client) from the code
	$(GO) run ./cmd/vigil openapi --dir openapi
	$(GO) generate ./openapi/...

bench: ## every benchmark of BENCHMARKS.md on a private redis-server; output saved in bench/out/
	@mkdir -p bench/out
	bench/run | tee bench/out/bench-$$(date -u +%Y%m%dT%H%M%SZ).txt

bench-short: ## each benchmark once, in its short form (run by CI so that they do not rot)
	bench/run -short

fuzz: ## a short run of the admin API fuzzer (FUZZTIME=20s)
	$(GO) test -run '^$$' -fuzz '^FuzzAPI$$' -fuzztime $(FUZZTIME) ./server/

# The browser test keeps its screenshot and the demo's log here.
E2E_OUT ?= bin/e2e

e2e: ## browser test: vigil demo's dashboard in headless Chromium (screenshot in bin/e2e)
	@if [ -z "$${VIGIL_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then \
		echo "make e2e: no Chromium here, so the browser test will skip (Debian: apt-get install -y chromium)" >&2; \
	fi
	@mkdir -p $(E2E_OUT)
	$(GO) test -tags e2e -count=1 -v -artifacts -outputdir $(abspath $(E2E_OUT)) ./e2e/

dashboard-png: ## refresh docs/dashboard*.png (the README's pictures of each view) with a run of the browser test (~2 min: the charts fill first)
	@mkdir -p docs $(E2E_OUT)
	VIGIL_E2E_DOCS=$(abspath docs) $(GO) test -tags e2e -count=1 -run '^TestDashboard$$' -artifacts -outputdir $(abspath $(E2E_OUT)) ./e2e/

vendor-uplot: ## fetch the dashboard's charting library (uPlot, pinned) from the npm registry into web/dashboard/vendor/uplot
	scripts/vendor-uplot

clean: ## remove build outputs and the test cache
	rm -rf bin dist
	$(GO) clean -testcache

# -race needs cgo, and cgo a C compiler: without one, say how to get it.
cgo-check:
	@if [ "$$($(GO) env CGO_ENABLED)" != 1 ]; then \
		echo "go test -race needs cgo, which is off here (no C compiler?)." >&2; \
		echo "  Debian: apt-get install -y gcc libc6-dev" >&2; \
		exit 2; \
	fi

# Some tests of the real-Redis suite start a private redis-server: install
# Debian's package when it is missing.
redis-server-check:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: installing the Debian package redis-server"; \
		if ! command -v apt-get >/dev/null 2>&1; then \
			echo "no apt-get here: install redis-server yourself and run again" >&2; \
			exit 2; \
		fi; \
		sudo=; if [ "$$(id -u)" -ne 0 ]; then sudo=sudo; fi; \
		$$sudo apt-get update && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server </dev/null; \
	fi
