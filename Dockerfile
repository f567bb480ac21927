# delayd in a container: build on Debian 12 with the same packages as CI
# (docker/deps.sh), run on Debian 12 slim with only the runtime libraries.
#
#   docker build -t delayd .          (podman: add --format docker, or the
#                                      OCI image it makes drops HEALTHCHECK)
#   docker run -d -p 127.0.0.1:7070:7070 -v delayd-data:/var/lib/delayd delayd

FROM debian:bookworm AS build
# Lets the container test remove what this stage leaves behind.
LABEL org.delayd.stage=build
COPY docker/deps.sh /src/docker/deps.sh
RUN DELAYD_DEPS=build /src/docker/deps.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
# The commit built (the context has no .git): docker build --build-arg
# DELAYD_COMMIT=$(git rev-parse --short=12 HEAD) .
ARG DELAYD_COMMIT=unknown
# The compiler cache lives in a cache mount, so a rebuild after a change
# compiles only what changed (BuildKit, or podman/buildah 1.24 and newer).
RUN --mount=type=cache,target=/ccache \
    export CCACHE_DIR=/ccache CCACHE_MAXSIZE=2G \
 && cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DDELAYD_BUILD_TESTS=OFF -DDELAYD_COMMIT=${DELAYD_COMMIT} \
 && cmake --build /build --target delayd delayctl \
 && strip /build/server/delayd /build/client/delayctl/delayctl

FROM debian:bookworm-slim
# The shared libraries the two binaries load (RocksDB is linked in; libpq
# for the PostgreSQL store; date/tz and the tz database for schedules' time
# zones; libcurl and the CA certificates for push delivery's HTTPS).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libspdlog1.10 libpq5 libdate-tz3 tzdata \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
      libsimdjson14 libcurl4 ca-certificates \
      libsnappy1v5 liblz4-1 libzstd1 libbz2-1.0 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --no-create-home --home-dir /var/lib/delayd \
      --shell /usr/sbin/nologin delayd \
 && mkdir -p /var/lib/delayd && chown delayd:delayd /var/lib/delayd
COPY --from=build /build/server/delayd /build/client/delayctl/delayctl /usr/local/bin/
USER delayd
# Every flag of delayd is also a DELAYD_* variable; override any with -e.
# Port 7071 serves only grpc.health.v1, in plaintext, so that the health
# check and Kubernetes' probes work whether or not TLS and tokens are on
# (DELAYD_TLS_CERT, DELAYD_TLS_KEY, DELAYD_AUTH_TOKENS: see the README).
# Port 9464 serves Prometheus metrics over plain HTTP (/metrics).
# Port 8080 serves the HTTP/JSON API (/v1/...; the same tokens as 7070).
# GLIBC_TUNABLES: glibc asks the kernel for huge pages for the heap (where
# the host's /sys/kernel/mm/transparent_hugepage/enabled allows it on
# request): a restart builds a million pending timers with far fewer page
# faults (tests/bench/README.md, "Restart with the heap on huge pages").
ENV GLIBC_TUNABLES=glibc.malloc.hugetlb=1
ENV DELAYD_LISTEN=0.0.0.0:7070 \
    DELAYD_HEALTH_LISTEN=0.0.0.0:7071 \
    DELAYD_METRICS_LISTEN=0.0.0.0:9464 \
    DELAYD_HTTP_LISTEN=0.0.0.0:8080 \
    DELAYD_DATA_DIR=/var/lib/delayd \
    DELAYD_SHUTDOWN_GRACE=5s
VOLUME /var/lib/delayd
EXPOSE 7070 7071 8080 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["delayctl", "--endpoint", "127.0.0.1:7071", "--timeout", "2s", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["delayd"]
