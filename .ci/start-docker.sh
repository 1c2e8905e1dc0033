#!/usr/bin/env bash
# Start a throwaway Docker engine for the compose test and print the variables to use it:
#
#   eval "$(.ci/start-docker.sh)"     # sets DOCKER_HOST, DOCKER_CONFIG, STREAMEVAL_DOCKER_PID
#
# Our machines reach Debian's archive and PyPI but no image registry (../shared/docker-here.md),
# so: Debian's docker.io engine, Compose v2 and buildx from the next Debian suite (bookworm
# packages only Compose v1), and a daemon with no iptables, NAT or default bridge, whose state
# lives in one temporary directory. Stop it with `.ci/stop-docker.sh`.
# Everything except the export lines goes to stderr.
set -euo pipefail

log() { echo "start-docker: $*" >&2; }
[[ $(id -u) -eq 0 ]] || { log "the engine needs root"; exit 1; }

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    log "installing docker.io and debootstrap with apt-get"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        docker.io debootstrap >&2
fi

ROOT=$(mktemp -d /tmp/streameval-docker.XXXXXX)
export DOCKER_CONFIG="$ROOT/config"
mkdir -p "$DOCKER_CONFIG/cli-plugins"

# Compose v2 and buildx, unpacked (not installed) from the next suite on the same mirror.
install_plugins() {
    local mirror apt="$ROOT/apt"
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
    echo "deb $mirror trixie main" > "$apt/sources.list"
    local options=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=-"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
        -o "APT::Sandbox::User=root" -qq)
    apt-get "${options[@]}" update >&2
    (cd "$apt/debs" && apt-get "${options[@]}" download docker-compose docker-buildx >&2)
    for deb in "$apt/debs"/*.deb; do dpkg-deb -x "$deb" "$apt/root"; done
    ln -s "$apt/root/usr/libexec/docker/cli-plugins/docker-compose" "$DOCKER_CONFIG/cli-plugins/"
    ln -s "$apt/root/usr/libexec/docker/cli-plugins/docker-buildx" "$DOCKER_CONFIG/cli-plugins/"
}
install_plugins

SOCKET="$ROOT/docker.sock"
dockerd --data-root "$ROOT/data" --exec-root "$ROOT/exec" --pidfile "$ROOT/docker.pid" \
    -H "unix://$SOCKET" --iptables=false --ip6tables=false --ip-forward=false \
    --ip-masq=false --bridge=none --storage-driver=overlay2 \
    > "$ROOT/dockerd.log" 2>&1 &
dockerd_pid=$!
export DOCKER_HOST="unix://$SOCKET"
for _ in $(seq 1 60); do
    if docker version >/dev/null 2>&1; then
        log "engine up ($ROOT), compose $(docker compose version --short)"
        echo "export DOCKER_HOST=$DOCKER_HOST"
        echo "export DOCKER_CONFIG=$DOCKER_CONFIG"
        echo "export STREAMEVAL_DOCKER_ROOT=$ROOT"
        exit 0
    fi
    sleep 0.5
done
log "the engine did not start; its log:"
tail -n 20 "$ROOT/dockerd.log" >&2
kill "$dockerd_pid" 2>/dev/null || true
exit 1
