# syntax=docker/dockerfile:1
# Build: a release binary against Debian 12's glibc and OpenSSL 3 (zlib and libgit2 are
# linked statically), cross-compiled on the build machine for each TARGETARCH (amd64,
# arm64), so a multi-platform build runs no emulated compiler. Runtime: distroless cc on
# Debian 12, which carries glibc, libgcc and libssl3 and nothing else: no shell, non-root
# uid 65532. scripts/check-image.sh compares the binary's shared libraries (ldd) with what
# the runtime stage provides.
#
# Base images are pinned by digest; refresh a pin with
#   docker buildx imagetools inspect rust:1.95-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS build
ARG TARGETARCH
# What git2 (libgit2 with ssh, whose libssh2 uses OpenSSL's cryptography) builds against,
# for the target: a C cross compiler and the target's libssl-dev. Installed here rather
# than assumed.
RUN set -eu; \
    case "$TARGETARCH" in \
      amd64) echo x86_64-unknown-linux-gnu > /rust-target; extra="" ;; \
      arm64) echo aarch64-unknown-linux-gnu > /rust-target; dpkg --add-architecture arm64; \
             extra="gcc-aarch64-linux-gnu libc6-dev-arm64-cross libssl-dev:arm64" ;; \
      *) echo "unsupported TARGETARCH $TARGETARCH (amd64 or arm64)" >&2; exit 1 ;; \
    esac; \
    apt-get update; \
    apt-get install -y --no-install-recommends pkg-config libssl-dev $extra; \
    rm -rf /var/lib/apt/lists/*; \
    rustup target add "$(cat /rust-target)"
# The cross linker, C compiler and pkg-config paths for arm64; unused for amd64.
ENV CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    PKG_CONFIG_aarch64_unknown_linux_gnu=/usr/bin/pkg-config \
    PKG_CONFIG_PATH_aarch64_unknown_linux_gnu=/usr/lib/aarch64-linux-gnu/pkgconfig \
    PKG_CONFIG_ALLOW_CROSS=1
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
# The workspace's crates (protocol, apiserver, emulate, hash, and the source engine) build
# with the dependencies.
COPY crates ./crates
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked --target "$(cat /rust-target)" \
    && rm -rf src
COPY src ./src
# `metahooks emulate` embeds the shipped registrations.
COPY manifests/controllers ./manifests/controllers
COPY manifests/config-monitor ./manifests/config-monitor
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --target "$(cat /rust-target)" \
    && cp "target/$(cat /rust-target)/release/metahooks" /metahooks

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
# OCI annotations; the release workflow passes the version and commit.
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="metahooks" \
      org.opencontainers.image.description="Hook server for Metacontroller: APIMock, MonitoredService and configsync" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/metahooks/metahooks" \
      org.opencontainers.image.documentation="https://github.com/metahooks/metahooks/tree/main/docs" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /metahooks /usr/local/bin/metahooks
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/metahooks"]
CMD ["serve"]
