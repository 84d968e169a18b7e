# Revenant: one image, every role (`revenant serve`, `relay`, `ingest`, `alerts`, `replay`).
# Build:  docker build -t revenant .
# Run:    docker run -e DATABASE_URL=postgres://… -e AMQP_URL=amqp://… -e REVENANT_BIND=0.0.0.0:3000 -p 3000:3000 revenant
# Node 20 for the build tools: the tailwind CLI needs it (bookworm's own nodejs is 18, and its
# npm 9 leaves out tailwind's native binding: "Cannot find native binding").
FROM node:20-bookworm-slim AS node
FROM rust:1.95-bookworm AS build
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
RUN rustup target add wasm32-unknown-unknown
WORKDIR /src
# Queries are checked against the committed .sqlx/ data: no database at build time.
ENV SQLX_OFFLINE=true
# wasm-bindgen-cli must match the wasm-bindgen in Cargo.lock. Not `--locked`, as in
# scripts/setup: the CLI's own lock names a webpki-roots that the registry here does not hold.
COPY Cargo.lock ./
RUN cargo install wasm-bindgen-cli --version "$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')"
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
# Dependency layer: the manifests with empty crates, built once; a source change rebuilds
# only the workspace's own crates.
COPY Cargo.toml ./
COPY app/Cargo.toml app/
COPY engine/Cargo.toml engine/
COPY server/Cargo.toml server/
COPY testkit/Cargo.toml testkit/
COPY tools/Cargo.toml tools/
COPY types/Cargo.toml types/
# The vendored, patched AMQP types crate ([patch.crates-io]) is needed whole from the start.
COPY vendor vendor
RUN mkdir -p app/src engine/src server/src testkit/src tools/src types/src \
    && touch app/src/lib.rs engine/src/lib.rs server/src/lib.rs testkit/src/lib.rs tools/src/lib.rs types/src/lib.rs \
    && echo 'fn main() {}' > server/src/main.rs \
    && cargo build --locked -p app --lib --target wasm32-unknown-unknown --no-default-features --features hydrate --profile wasm-release \
    && cargo build --locked -p server --release \
    && rm -rf app/src engine/src server/src testkit/src tools/src types/src
COPY . .
# The stub crates' artefacts are newer than nothing: make sure the real sources are rebuilt.
RUN touch app/src/lib.rs engine/src/lib.rs server/src/lib.rs server/src/main.rs tools/src/lib.rs types/src/lib.rs \
    && ./scripts/build --release

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /app revenant
WORKDIR /app
COPY --from=build /src/target/release/revenant /usr/local/bin/revenant
COPY --from=build /src/target/site /app/target/site
USER revenant
ENV REVENANT_BIND=0.0.0.0:3000 REVENANT_SITE_ROOT=/app/target/site REVENANT_LOG_FORMAT=json
EXPOSE 3000
# /healthz answers from the process itself (no dependency), so a restart never waits on the broker.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s CMD ["curl", "-fsS", "http://127.0.0.1:3000/healthz"]
ENTRYPOINT ["revenant"]
CMD ["serve"]
