# syntax=docker/dockerfile:1
#
# One build for every binary of the suite; one small image per binary, chosen
# with --target (commerce-api, outbox-relay, product-consumers, migrate):
#
#   docker build --target commerce-api -t commerce-pipeline/commerce-api .
#
# The images are distroless/static: no shell, no libc, running as nonroot.
# Each carries /usr/local/bin/healthcheck (cmd/healthcheck) for health checks
# and /usr/local/bin/pipelinectl (cmd/pipelinectl), the operators' tool, which
# finds DATABASE_URL, KAFKA_BROKERS and KAFKA_PREFIX in the service's
# environment:
#
#   docker compose exec product-consumers pipelinectl dlt list

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
# The modules go.mod replaces with a directory of this clone (pcon and
# pconprom, pcontrace): go mod download reads their go.mod files.
COPY pkg/pcon/go.mod pkg/pcon/go.sum ./pkg/pcon/
COPY pkg/pcon/pconprom/go.mod pkg/pcon/pconprom/go.sum ./pkg/pcon/pconprom/
COPY pkg/pcon/pcontrace/go.mod pkg/pcon/pcontrace/go.sum ./pkg/pcon/pcontrace/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries: no cgo, so they run on distroless/static.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/ \
      ./services/commerce-api ./services/outbox-relay ./services/product-consumers \
      ./cmd/migrate ./cmd/healthcheck ./cmd/pipelinectl

FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/healthcheck /usr/local/bin/healthcheck
COPY --from=build /out/pipelinectl /usr/local/bin/pipelinectl
USER nonroot:nonroot

FROM runtime AS commerce-api
COPY --from=build /out/commerce-api /usr/local/bin/commerce-api
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/commerce-api"]

FROM runtime AS outbox-relay
COPY --from=build /out/outbox-relay /usr/local/bin/outbox-relay
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/outbox-relay"]

FROM runtime AS product-consumers
COPY --from=build /out/product-consumers /usr/local/bin/product-consumers
EXPOSE 8082
ENTRYPOINT ["/usr/local/bin/product-consumers"]

FROM runtime AS migrate
COPY --from=build /out/migrate /usr/local/bin/migrate
ENTRYPOINT ["/usr/local/bin/migrate"]
