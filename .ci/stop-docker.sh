#!/usr/bin/env bash
# Stop the engine .ci/start-docker.sh started (by its PID, never by name) and remove its state.
#   .ci/stop-docker.sh "$STREAMEVAL_DOCKER_ROOT"
set -uo pipefail

ROOT=${1:?usage: stop-docker.sh STREAMEVAL_DOCKER_ROOT}
[[ -f "$ROOT/docker.pid" ]] || exit 0
pid=$(cat "$ROOT/docker.pid")
kill "$pid" 2>/dev/null
for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
# dockerd leaves its network namespace mount (and overlay mounts of killed containers) behind.
grep -o " $ROOT/[^ ]*" /proc/mounts | sort -r | xargs -r -n 1 umount -l 2>/dev/null
rm -rf "$ROOT"
