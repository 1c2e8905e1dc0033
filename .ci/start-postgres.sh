#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the store tests and print the variables to use it:
#
#   eval "$(.ci/start-postgres.sh)"      # sets STREAMEVAL_TEST_PG_URL (and ..._PG_DATA)
#
# Installs PostgreSQL with apt-get when no initdb is found, creates a cluster in a temporary
# directory owned by a non-root user (PostgreSQL refuses to run as root), trusts local
# connections, listens on 127.0.0.1:${PGPORT:-5432} and waits until it accepts connections.
# Stop it with: pg_ctl -D "$STREAMEVAL_TEST_PG_DATA" stop (as the owning user).
# Everything except the export lines goes to stderr.
set -euo pipefail

PORT="${PGPORT:-5432}"
PG_USER_NAME="streameval-pg"

log() { echo "start-postgres: $*" >&2; }

find_bindir() {
    # The newest installed major version wins.
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n "$dir" && -x "$dir/initdb" ]]; then
        echo "$dir"
    elif command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
    fi
}

install_postgres() {
    local sudo=""
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || { log "initdb not found and not root: install PostgreSQL first"; exit 1; }
        sudo="sudo"
    fi
    log "installing PostgreSQL with apt-get"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >&2
}

BINDIR=$(find_bindir)
if [[ -z "$BINDIR" ]]; then
    install_postgres
    BINDIR=$(find_bindir)
    [[ -n "$BINDIR" ]] || { log "PostgreSQL was installed but initdb is still not found"; exit 1; }
fi

# As root, run the server as an unprivileged user; otherwise as ourselves.
if [[ $(id -u) -eq 0 ]]; then
    id "$PG_USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home "$PG_USER_NAME"
    as_owner() { su "$PG_USER_NAME" -s /bin/bash -c "$*"; }
    OWNER="$PG_USER_NAME"
else
    as_owner() { bash -c "$*"; }
    OWNER="$(id -un)"
fi

DATA=$(mktemp -d /tmp/streameval-pg.XXXXXX)
chown "$OWNER" "$DATA"
chmod 700 "$DATA"

log "initdb in $DATA ($BINDIR)"
as_owner "'$BINDIR/initdb' -D '$DATA' -U postgres --auth=trust -E UTF8 --no-locale" >&2
# fsync=off: a throwaway test server needs no durability, and tests run faster.
log "starting on 127.0.0.1:$PORT"
as_owner "'$BINDIR/pg_ctl' -D '$DATA' -l '$DATA/server.log' -w -t 60 \
    -o \"-h 127.0.0.1 -p $PORT -k '$DATA' -c fsync=off\" start" >&2 \
    || { log "server did not start; its log:"; cat "$DATA/server.log" >&2; exit 1; }

for _ in $(seq 1 60); do
    if "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
        echo "export STREAMEVAL_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
        echo "export STREAMEVAL_TEST_PG_DATA=$DATA"
        exit 0
    fi
    sleep 0.5
done
log "server is not accepting connections on 127.0.0.1:$PORT"
exit 1
