# Dynagent service image. Agents come from a mounted folder or from Nacos; API keys and
# model keys come from the environment, never from the image.
#
#   docker build -t dynagent .                          (or: scripts/image.sh, no engine)
#   docker run -p 8090:8090 -e DYNAGENT_API_KEYS=… dynagent
#
# BASE: any image with Python 3.11+ and `python3 -m venv` (scripts/image.sh passes a base
# it makes from Debian packages, since it may have no registry to pull from).
# EXTRAS: the optional parts installed; the default carries what the fleet and
# Kubernetes notes use (Redis sessions, OpenTelemetry). `--build-arg EXTRAS=` for none.
ARG BASE=python:3.11-slim
FROM ${BASE}
ARG EXTRAS=redis,otel
# A CA bundle for pip behind a TLS-inspecting proxy (scripts/image.sh mounts the host's);
# a build argument, so that it is not part of the image's environment.
ARG PIP_CERT=

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/dynagent/bin:$PATH
WORKDIR /app

COPY pyproject.toml README.md ./
COPY service ./service
RUN python3 -m venv --upgrade-deps /opt/dynagent \
    && /opt/dynagent/bin/pip install ".${EXTRAS:+[$EXTRAS]}" \
    && rm -rf /app/service /app/build \
    && groupadd --gid 10001 dynagent \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /app \
       --shell /usr/sbin/nologin dynagent \
    && mkdir -p /app/var && chown 10001:10001 /app/var

COPY config-samples ./config-samples
# A numeric user, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001

# The port, host and config are settings (DYNAGENT_PORT, DYNAGENT_HOST, DYNAGENT_CONFIG)
# rather than arguments, so that the health check reads the same ones as the server.
# Listening on 0.0.0.0 needs API keys (DYNAGENT_API_KEYS or auth.keys_file).
ENV DYNAGENT_CONFIG=/app/config-samples/service.yaml DYNAGENT_HOST=0.0.0.0 DYNAGENT_PORT=8090
EXPOSE 8090
HEALTHCHECK --interval=10s --timeout=3s CMD ["dynagent", "health"]

ENTRYPOINT ["dynagent"]
CMD ["serve"]
