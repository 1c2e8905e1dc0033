#!/usr/bin/env bash
# CI-only stand-ins for the two registry images docker-compose.yml's CPU profile starts from,
# built locally because no image registry is reachable here (../shared/docker-here.md):
#   localdebian:latest   a minimal Debian bookworm from debootstrap
#   python:3.11-slim     Debian's Python 3.11 in a venv first on PATH, trusting the host's CAs
#   postgres:16          Debian's PostgreSQL (15) behind an entrypoint honouring POSTGRES_*
# The project's Dockerfiles keep their real FROM lines; these tags merely satisfy them.
# Needs a running engine (DOCKER_HOST) and root.
set -euo pipefail
cd "$(dirname "$0")"

log() { echo "images: $*" >&2; }

if ! docker image inspect localdebian:latest >/dev/null 2>&1; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    rootfs=$(mktemp -d /tmp/streameval-rootfs.XXXXXX)
    log "debootstrap bookworm from $mirror"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null
    tar -C "$rootfs" --exclude='./var/cache/apt/archives/*.deb' \
        --exclude='./var/lib/apt/lists/*' -c . | docker import - localdebian:latest >/dev/null
    rm -rf "$rootfs"
fi

# Outbound TLS here is re-signed by a local CA, written at boot: copied in now, never committed.
rm -rf python/certs && mkdir python/certs
cp /usr/local/share/ca-certificates/*.crt python/certs/ 2>/dev/null || true

log "building the python:3.11-slim and postgres:16 stand-ins"
docker build -q --network host -t python:3.11-slim python >/dev/null &
python_build=$!
docker build -q --network host -t postgres:16 postgres >/dev/null
wait "$python_build"
log "done"
