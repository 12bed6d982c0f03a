#!/usr/bin/env bash
# Start a throwaway PostgreSQL on 127.0.0.1 for the store tests; print its URL (and its folder,
# for `stop`). Each start has a folder and a free port of its own, so that two test runs on one
# host never stop or wipe each other's server.
# Usage: eval "$(scripts/postgres.sh start)"   ...   scripts/postgres.sh stop
set -euo pipefail
PORT=${PGPORT_TEST:-}
DIR=${PGDIR_TEST:-}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
case "${1:-start}" in
start)
    if [ -z "$BIN" ]; then
        (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null) 1>&2
        BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    fi
    RUN=(); [ "$(id -u)" = 0 ] && RUN=(su postgres -c)
    if [ -z "$DIR" ]; then DIR=$(mktemp -d /tmp/autotune-pg.XXXXXX); else rm -rf "$DIR"; mkdir -p "$DIR"; fi
    chmod 755 "$DIR"; [ "$(id -u)" = 0 ] && chown postgres "$DIR"
    if [ -z "$PORT" ]; then
        PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    cmd_init="$BIN/initdb -D $DIR/data -A trust -U postgres --no-sync"
    cmd_start="$BIN/pg_ctl -D $DIR/data -l $DIR/log -w -o '-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off' start"
    if [ ${#RUN[@]} -gt 0 ]; then "${RUN[@]}" "$cmd_init" >/dev/null; "${RUN[@]}" "$cmd_start" >/dev/null
    else eval "$cmd_init" >/dev/null; eval "$cmd_start" >/dev/null; fi
    psql -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE DATABASE autotune;" >/dev/null
    echo "export AUTOTUNE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/autotune"
    echo "export PGDIR_TEST=$DIR"
    ;;
stop)
    if [ -n "$DIR" ] && [ -d "$DIR/data" ]; then
        if [ "$(id -u)" = 0 ]; then su postgres -c "$BIN/pg_ctl -D $DIR/data -m fast stop" >/dev/null || true
        else "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null || true; fi
        rm -rf "$DIR"
    fi
    ;;
esac
