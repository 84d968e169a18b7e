# Revenant: one image, every role (`revenant serve`, `relay`, `ingest`, `alerts`, `replay`).
# Build:  docker build -t revenant .
# Run:    docker run -e DATABASE_URL=postgres://… -e AMQP_URL=amqp://… -e REVENANT_BIND=0.0.0.0:3000 -p 3000:3000 revenant
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-unknown-unknown
WORKDIR /src
# wasm-bindgen-cli must match the wasm-bindgen in Cargo.lock.
COPY Cargo.lock ./
RUN cargo install wasm-bindgen-cli --version "$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')"
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN ./scripts/build --release

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /app revenant
WORKDIR /app
COPY --from=build /src/target/release/revenant /usr/local/bin/revenant
COPY --from=build /src/target/site /app/target/site
USER revenant
ENV REVENANT_BIND=0.0.0.0:3000 REVENANT_SITE_ROOT=/app/target/site REVENANT_LOG_FORMAT=json
EXPOSE 3000
HEALTHCHECK CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3000"]
ENTRYPOINT ["revenant"]
CMD ["serve"]
