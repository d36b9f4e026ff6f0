# Dynagent service image. Agents come from a mounted folder or from Nacos;
# API keys and model keys come from the environment, never from the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY service ./service
RUN pip install . && useradd --system --uid 10001 dynagent \
    && mkdir -p /app/var && chown dynagent /app/var

COPY config-samples ./config-samples
USER dynagent
EXPOSE 8090
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8090/healthz'); sys.exit(0)"

# Listening on 0.0.0.0 needs API keys (DYNAGENT_API_KEYS or auth.keys_file).
ENTRYPOINT ["dynagent"]
CMD ["serve", "--config", "/app/config-samples/service.yaml", "--host", "0.0.0.0"]
