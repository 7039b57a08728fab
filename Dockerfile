# syntax=docker/dockerfile:1
# Build: a release binary against Debian 12's glibc and OpenSSL 3 (zlib and libgit2 are
# linked statically). Runtime: distroless cc on Debian 12, which carries glibc, libgcc and
# libssl3 and nothing else: no shell, non-root uid 65532. scripts/check-image.sh compares
# the binary's shared libraries (ldd) with what the runtime stage provides.
FROM rust:1.95-bookworm AS build
# What git2 (libgit2 with https) builds against; installed here rather than assumed.
RUN apt-get update \
    && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
# The workspace's small crates (protocol, apiserver, emulate) build with the dependencies.
COPY crates ./crates
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY src ./src
# `metahooks emulate` embeds the shipped registrations.
COPY manifests/controllers ./manifests/controllers
RUN touch src/main.rs src/lib.rs && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/metahooks /usr/local/bin/metahooks
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/metahooks"]
CMD ["serve"]
