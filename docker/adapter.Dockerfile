# The adapter image: streameval on top of the vLLM image, so it can serve the `openai`
# adapter (in front of a `vllm serve` container, as docker-compose.yml does) or the
# in-process `vllm` adapter on the GPUs, and shares the vLLM image's layers on disk.
#   docker build -f docker/adapter.Dockerfile -t streameval-adapter .
#   docker run --gpus all -p 8765:8765 streameval-adapter \
#       streameval adapter serve vllm --host 0.0.0.0 --config qwen2.5-vl-7b

ARG BASE_IMAGE=vllm/vllm-openai:latest
FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml README.md ./
COPY streameval ./streameval
COPY core_server ./core_server
COPY adapters ./adapters
COPY scorer ./scorer
COPY synth ./synth
# vLLM images install their Python packages with uv; fall back to pip on other bases.
RUN if command -v uv >/dev/null; then uv pip install --system .; \
    else python3 -m pip install .; fi \
    && rm -rf /build
WORKDIR /work
# The base image starts the vLLM API server; this one starts what CMD says.
ENTRYPOINT []
EXPOSE 8765
CMD ["streameval", "adapter", "serve", "openai", "--host", "0.0.0.0", "--port", "8765"]
