# syntax=docker/dockerfile:1
# The release binary, built by the same command CI runs, on a minimal non-root
# runtime: no shell, no package manager; the root filesystem can be read-only.

FROM rust:1.95-bookworm AS build
# etcd-client compiles etcd's protobuf definitions with protoc.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --release

# glibc and libgcc only (rustls, no OpenSSL); the :nonroot tag runs as 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/storage-transfer-apiserver /usr/local/bin/storage-transfer-apiserver
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/storage-transfer-apiserver"]
