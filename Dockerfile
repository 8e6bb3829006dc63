# infergate's container image: a static binary on distroless, as user nonroot (65532), port 8000.
# Without Docker, tools/ociimage builds the same image as an OCI archive (see docs/deploy.md);
# tools/ociimage's test holds the two to the same entrypoint, user and port.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg REVISION=$(git rev-parse HEAD) -t infergate .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/infergate ./runtime

# static: CA certificates, tzdata, /etc/passwd with nonroot; no shell. Probes are the
# orchestrator's (GET /health, /v2/health/ready), so no HEALTHCHECK.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title="infergate" \
      org.opencontainers.image.source="https://github.com/infergate/infergate" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/infergate /infergate
USER 65532:65532
WORKDIR /tmp
EXPOSE 8000
ENTRYPOINT ["/infergate"]
