# Commerce event pipeline. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
# golangci-lint is pinned and installed from the Go module proxy into .bin/;
# its configuration is .golangci.yml.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/.bin/golangci-lint
# Tests get a real PostgreSQL and Redis from scripts/testenv.sh, and the tools
# the target uses: Apache Kafka's broker (a JDK, Maven and the broker's jars)
# for every test that talks to Kafka, the browser for the e2e suite's
# live-page test, promtool for the alert rules' tests, Schemathesis for the
# API's contract test.
TESTENV_TESTS := eval "$$(scripts/testenv.sh browser promtool kafka schemathesis)"
TESTENV_E2E := eval "$$(scripts/testenv.sh browser kafka)"
TEST_TIMEOUT ?= 30m
# The modules nested in this clone, which ./... from the root does not reach:
# pcon and pconprom (published on their own), and pcon's tests against Apache
# Kafka (a module of their own: they need the root module's testenv and
# pcon's internals). GOWORK=off: each is checked with its own go.mod, not
# with a developer's go.work.
NESTED_MODULES := pkg/pcon pkg/pcon/pconprom pkg/pcon/pcontrace pkg/pcon/internal/repotest
in-modules = set -e; for m in . $(NESTED_MODULES); do (cd $$m && export GOWORK=off && $(1)); done

# KAFKA chooses the broker of make dev and make bench: real (Apache Kafka's
# own broker, a JVM on loopback; needs a JDK, installed when missing) or
# embedded (kfake, in-process, no JDK). Each target has its default; set it
# on the command line or in the environment: make dev KAFKA=real.
dev: KAFKA ?= embedded
bench: KAFKA ?= real
# NODES is the size of the real Kafka cluster of make kafka and make dev
# KAFKA=real: 1, or 3 (and more) for three replicas of every topic with
# min.insync.replicas=2, as in production (make kafka NODES=3).
NODES ?= 1
check-kafka = $(if $(filter-out 1,$(words $(KAFKA)))$(filter-out real embedded,$(KAFKA)),\
	$(error KAFKA must be real or embedded, got "$(KAFKA)"))

.PHONY: help test lint migrate bench up up-observability dev e2e run-api run-relay run-consumers kafka dev-kafka

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# -shuffle=on runs each package's tests (and benchmarks) in a random order,
# printed as -test.shuffle N, so that a test relying on another having run
# first fails; go test -shuffle=N repeats an order.
test: ## run every test of every module (with -race, in random order) against real PostgreSQL, Redis and Apache Kafka
	@$(TESTENV_TESTS) && $(call in-modules,$(GO) test -race -count=1 -shuffle=on -timeout $(TEST_TIMEOUT) ./...)

lint: ## in every module: go mod tidy is a no-op, golangci-lint with .golangci.yml, go vet for macOS; the OpenAPI document against Redocly's recommended rules
	@$(call in-modules,$(GO) mod tidy -diff || { echo "$$m: go.mod/go.sum are not tidy: run go mod tidy there" >&2; exit 1; })
	@v=$$($(GOLANGCI_LINT) version --short 2>/dev/null); [ "v$${v#v}" = "$(GOLANGCI_LINT_VERSION)" ] || \
		{ echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into .bin/"; \
		  GOBIN=$(CURDIR)/.bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); }
	@$(call in-modules,echo "golangci-lint: $$m" && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...)
	@# The repository builds and vets on macOS too (build tags keep the
	@# Linux-only parts, such as the broker runner's parent-death signal, out).
	@$(call in-modules,GOOS=darwin $(GO) vet ./...)
	@command -v npm >/dev/null 2>&1 || { echo "make lint needs Node.js 20.19+ and npm (the OpenAPI linter)" >&2; exit 1; }
	@cd tools/redocly && npm ci --no-audit --no-fund --silent
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true tools/redocly/node_modules/.bin/redocly lint \
		--extends=recommended services/commerce-api/internal/api/openapi.yaml

migrate: ## apply the schema migrations to DATABASE_URL
	$(GO) run ./cmd/migrate

bench: ## run the benchmarks on Apache Kafka (relay, e2e, flashsale: three nodes, then one; KAFKA=embedded: kfake); each prints its baseline and ratio
	$(check-kafka)
	@eval "$$(scripts/testenv.sh $(if $(filter real,$(KAFKA)),kafka))" && \
		for b in $$(ls -d bench/*/ 2>/dev/null); do echo "== $$b"; KAFKA=$(KAFKA) $(GO) run ./$$b || exit 1; done

e2e: ## the end-to-end suite at a larger size (E2E_ACTIONS, E2E_RATE)
	@$(TESTENV_E2E) && E2E_ACTIONS=$${E2E_ACTIONS:-30000} E2E_RATE=$${E2E_RATE:-400} $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v -run . ./e2e/

up: ## the whole stack on Docker (docker compose up --build)
	docker compose up --build

up-observability: ## the stack plus Prometheus and Grafana
	docker compose --profile observability up --build

dev: ## run the whole pipeline on this machine without Docker, until Ctrl-C (KAFKA=real: on Apache Kafka; NODES=3: three nodes)
	$(check-kafka)
	@KAFKA=$(KAFKA) NODES=$(NODES) scripts/dev.sh

run-api: ## run commerce-api (needs DATABASE_URL)
	$(GO) run ./services/commerce-api

run-relay: ## run outbox-relay (needs DATABASE_URL, KAFKA_BROKERS)
	$(GO) run ./services/outbox-relay

run-consumers: ## run product-consumers (needs DATABASE_URL, KAFKA_BROKERS, REDIS_URL)
	$(GO) run ./services/product-consumers

kafka: ## run Apache Kafka on 127.0.0.1:9092 with every topic, until Ctrl-C (its log stays in .dev/kafka; NODES=3: three nodes on :9092, :9094, :9096)
	@NODES=$(NODES) scripts/kafka.sh

dev-kafka: ## run the in-process dev Kafka broker (kfake) on 127.0.0.1:9092 with every topic
	$(GO) run ./cmd/devkafka
