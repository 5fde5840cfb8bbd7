#!/bin/sh
# First start on an empty data directory: make the cluster with POSTGRES_USER as its
# superuser (password authentication over the network) and POSTGRES_DB, as the official
# image does. Then serve in the foreground on every address of the container.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
[ -n "${POSTGRES_PASSWORD:-}" ] || { echo "postgres: POSTGRES_PASSWORD is not set" >&2; exit 1; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$password"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$password" \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$password"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
        createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
        pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
