# The glovebox executor's container image (deploy/kubernetes runs it).
#
#   docker build -t glovebox .                          # bubblewrap for runs
#   docker build --build-arg WITH_RUNSC=1 -t glovebox . # and runsc (gVisor) too
#
# Three stages: the pinned Ruby guest image fetched with npm and checked
# against its hash; glovebox built with cgo (wasmtime is a C library) and
# run once to compile the guest and build its boot snapshot; a small Debian
# runtime with that cache baked in, running as an unprivileged user.
#
# The Ruby cache is BAKED, not fetched at start: the executor's pods have
# no egress at all (deploy/kubernetes/networkpolicy.yaml), so they could not
# fetch it, and compiling it takes ~20 s of one core. The compiled module
# belongs to the build machine's CPU features and wasmtime version; the
# pod's init container copies the cache to a writable volume and runs
# `glovebox setup`, which reuses it when it matches and rebuilds it when
# not, so a different node CPU costs one compile, never a failure.

ARG DEBIAN=bookworm

FROM node:20-${DEBIAN}-slim AS ruby
# Keep in step with internal/image (Package, Version, SHA256).
ARG RUBY_PACKAGE=@ruby/4.0-wasm-wasi
ARG RUBY_VERSION=2.10.1
ARG RUBY_SHA256=9fe3c749730a16da9b0d1a973bb77bec164f8d958efcb7f5b81e4275ea8c5439
WORKDIR /ruby
RUN npm pack --silent "${RUBY_PACKAGE}@${RUBY_VERSION}" \
 && tar -xzf ./*.tgz package/dist/ruby+stdlib.wasm \
 && echo "${RUBY_SHA256}  package/dist/ruby+stdlib.wasm" | sha256sum -c - \
 && mv package/dist/ruby+stdlib.wasm /ruby/ruby+stdlib.wasm

FROM golang:1.26-${DEBIAN} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# cgo on: wasmtime-go links wasmtime's C library.
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/glovebox ./cmd/glovebox
COPY --from=ruby /ruby/ruby+stdlib.wasm /opt/glovebox/ruby+stdlib.wasm
# Compile the guest and build its boot snapshot into the cache we ship.
RUN GLOVEBOX_IMAGE=/opt/glovebox/ruby+stdlib.wasm GLOVEBOX_CACHE_DIR=/opt/glovebox/cache \
    /out/glovebox setup

FROM debian:${DEBIAN}-slim
# bubblewrap is the default backend for runs; runsc (gVisor) is optional.
# Inside Kubernetes, bubblewrap needs user namespaces that the RuntimeDefault
# seccomp profile may refuse; see deploy/kubernetes/README.md.
# Runs execute programs from this image's filesystem: add the interpreters
# your commands need (EXTRA_PACKAGES="python3 nodejs", say).
ARG WITH_BWRAP=1
ARG WITH_RUNSC=0
ARG EXTRA_PACKAGES=""
RUN set -eux; pkgs="ca-certificates $EXTRA_PACKAGES"; \
    if [ "$WITH_BWRAP" = 1 ]; then pkgs="$pkgs bubblewrap"; fi; \
    if [ "$WITH_RUNSC" = 1 ]; then pkgs="$pkgs runsc"; fi; \
    apt-get update; apt-get install -y --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --system --gid 65532 glovebox; \
    useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/glovebox --shell /usr/sbin/nologin glovebox; \
    mkdir -p /var/lib/glovebox /var/cache/glovebox; \
    chown 65532:65532 /var/lib/glovebox /var/cache/glovebox
COPY --from=build /out/glovebox /usr/local/bin/glovebox
COPY --from=build --chown=65532:65532 /opt/glovebox /opt/glovebox
ENV GLOVEBOX_IMAGE=/opt/glovebox/ruby+stdlib.wasm \
    GLOVEBOX_CACHE_DIR=/var/cache/glovebox
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/glovebox"]
CMD ["executor", "--help"]
