#!/usr/bin/env bash
# The cold cost of the compose path in CI, phase by phase: a fresh Docker engine, the stand-in
# base images, `docker compose --profile cpu up --build --exit-code-from benchmark` with no
# build cache, a second `up` with the images built, and `down -v`. Needs root and a machine
# like CI's (../shared/docker-here.md); run from the repository root:
#   bash bench/bench_compose.sh
set -euo pipefail
cd "$(dirname "$0")/.."

phase_start=$SECONDS
phase() {
    printf '| %s | %d |\n' "$1" "$((SECONDS - phase_start))"
    phase_start=$SECONDS
}

eval "$(.ci/start-docker.sh 2>/dev/null)"
trap '.ci/stop-docker.sh "$STREAMEVAL_DOCKER_ROOT"' EXIT
results=$(mktemp -d)
export COMPOSE_FILE=docker-compose.yml:.ci/images/compose.ci.yml COMPOSE_PROJECT_NAME=bench
export RESULTS_DIR=$results BENCHMARK_DIR=$results/benchmark VIDEO_DIR=$results/videos
compose() { docker compose --profile cpu "$@" >/dev/null 2>&1; }

echo "| phase | seconds |"
echo "|---|---:|"
phase "engine: install if missing, Compose v2 plugins, dockerd up"
.ci/images/build.sh 2>/dev/null
phase "stand-in base images (debootstrap, python:3.11-slim, postgres:16)"
compose up --build --exit-code-from benchmark
phase "cold \`up --build --exit-code-from benchmark\` (4 images built, job exits 0)"
compose down -v
compose up --exit-code-from benchmark
phase "warm \`up --exit-code-from benchmark\` (images built, fresh volumes)"
compose down -v --rmi local
phase "\`down -v --rmi local\`"
ls "$results"/*.json >/dev/null
rm -rf "$results"
