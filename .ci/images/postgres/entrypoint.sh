#!/bin/sh
# What the official image's entrypoint does for this project: a cluster in $PGDATA on first
# start, owned by POSTGRES_USER with POSTGRES_PASSWORD, database POSTGRES_DB, listening on
# every interface of the container with password authentication.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    su postgres -c "initdb -D '$PGDATA' -U '$POSTGRES_USER' --pwfile=/tmp/pwfile \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale" >/dev/null
    rm /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        su postgres -c "postgres -D '$PGDATA' -c listen_addresses='' " &
        until su postgres -c "pg_isready -q -h /run/postgresql -U '$POSTGRES_USER'"; do sleep 0.2; done
        su postgres -c "createdb -h /run/postgresql -U '$POSTGRES_USER' '$POSTGRES_DB'"
        su postgres -c "pg_ctl -D '$PGDATA' -m fast -w stop" >/dev/null
    fi
fi
exec su postgres -c "exec postgres -D '$PGDATA' -c listen_addresses='*'"
