# make run   - install, build and start the whole service in one process (embedded store, no external server)
# make test  - install everything the tests need (npm and Debian packages) and run the whole suite
# make bench - run the benchmarks in bench/ (each bench/<name>/README.md holds its figures)
# make fuzz  - the fuzz suite against a real process for FUZZ_SECONDS (default 600)
# make soak  - a mixed workload for SOAK_MINUTES (default 20), memory and event-loop delay over time

SHELL := /bin/bash
NPM_STAMP := node_modules/.install-stamp
COVERAGE_MIN_LINES ?= 85
DEV_API_KEYS := dev-key-change-me-000000=demo

# The operator console (console/ sources) is built by Vite into console/dist, served at /console/.
.PHONY: console run build test test-deps bench clean keys fuzz soak

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NPM_STAMP)

build: $(NPM_STAMP)
	npx tsc -p tsconfig.json

console: $(NPM_STAMP)
	npx vite build --config console/vite.config.mjs

run: build console
	@if [ -z "$$API_KEYS" ]; then echo "API_KEYS not set: using the development key 'dev-key-change-me-000000' (account demo, all roles)"; fi
	API_KEYS="$${API_KEYS:-$(DEV_API_KEYS)}" node dist/main.js

# Debian packages the test suite needs: nats-server, and the MongoDB wire-protocol test server
# (mockupdb + mongomock). Installed only when missing.
test-deps:
	@bash .ci/system-deps.sh

test: $(NPM_STAMP) test-deps console
	npx tsc -p tsconfig.json --noEmit
	npx tsc -p console/tsconfig.json
	npx tap --allow-incomplete-coverage --coverage-report=json-summary --coverage-report=text-summary
	node .ci/coverage-gate.mjs $(COVERAGE_MIN_LINES)

# The fuzz suite alone, as long as asked (FUZZ_SECONDS, default 600); FUZZ_SEED=<n> replays a run.
# The service's event loop may not stall 100 ms (FUZZ_STALL_MS; the run inside `make test`: 400),
# and it sheds load as deployed (FUZZ_OVERLOAD_LOOP_DELAY_MS; off inside `make test`).
fuzz: $(NPM_STAMP) test-deps
	FUZZ_SECONDS=$${FUZZ_SECONDS:-600} FUZZ_STALL_MS=$${FUZZ_STALL_MS:-100} FUZZ_OVERLOAD_LOOP_DELAY_MS=$${FUZZ_OVERLOAD_LOOP_DELAY_MS:-200} npx tap --disable-coverage --timeout=$$(( $${FUZZ_SECONDS:-600} + 300 )) test/fuzz/fuzz.test.ts

# A mixed workload against one real process for SOAK_MINUTES (default 20): RSS, heap, event-loop delay, errors.
soak: build
	node --import @tapjs/typescript/import bench/soak/run.ts

# Each bench/<name>/run.ts runs with the same TypeScript loader tap uses; BENCH=name runs one (soak only by name: it runs for minutes, against the built service).
bench: $(NPM_STAMP) test-deps build
	@for f in bench/$${BENCH:-*}/run.ts; do \
		if [ -z "$$BENCH" ] && [ "$$f" = bench/soak/run.ts ]; then continue; fi; \
		echo "== $$f"; node --import @tapjs/typescript/import $$f || exit 1; done

keys: build
	node dist/cli/keys.js $(ARGS)

clean:
	rm -rf dist .tap coverage
