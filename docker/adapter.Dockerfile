# The adapter image: streameval on top of the vLLM image, so it can serve the `openai`
# adapter (in front of a `vllm serve` container, as docker-compose.yml does) or the
# in-process `vllm` adapter on the GPUs, and shares the vLLM image's layers on disk.
#   docker build -f docker/adapter.Dockerfile -t streameval-adapter .
#   docker run --gpus all -p 8765:8765 streameval-adapter \
#       streameval adapter serve vllm --host 0.0.0.0 --config qwen2.5-vl-7b
# Needs BuildKit for the installers' cache mounts (see docker/Dockerfile).

ARG BASE_IMAGE=vllm/vllm-openai:latest
FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_LINK_MODE=copy
WORKDIR /build
# The dependencies first, from pyproject.toml alone: a change to the sources reuses this
# layer. vLLM images install their Python packages with uv; fall back to pip on other bases.
COPY pyproject.toml ./
COPY docker/requirements.py ./docker/
RUN --mount=type=cache,target=/root/.cache/uv --mount=type=cache,target=/root/.cache/pip \
    python3 docker/requirements.py > requirements.txt \
    && if command -v uv >/dev/null; then uv pip install --system -r requirements.txt; \
    else python3 -m pip install -r requirements.txt; fi
COPY README.md ./
COPY streameval ./streameval
COPY core_server ./core_server
COPY adapters ./adapters
COPY scorer ./scorer
COPY synth ./synth
RUN if command -v uv >/dev/null; then \
        uv pip install --system --no-cache --no-deps --no-build-isolation .; \
    else python3 -m pip install --no-cache-dir --no-deps --no-build-isolation .; fi \
    && rm -rf /build
WORKDIR /work
# The base image starts the vLLM API server; this one starts what CMD says.
ENTRYPOINT []
EXPOSE 8765
CMD ["streameval", "adapter", "serve", "openai", "--host", "0.0.0.0", "--port", "8765"]
