# syntax=docker/dockerfile:1
# Build: a release binary against glibc. Runtime: distroless cc (glibc, no shell),
# non-root uid 65532, nothing else in the image.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/metahooks /usr/local/bin/metahooks
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/metahooks"]
CMD ["serve"]
