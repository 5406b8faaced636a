#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the evomem-store conformance suite
# and benchmark, and print the URL to use:
#
#   eval "$(scripts/ci-postgres.sh)"      # sets EVOMEM_TEST_PG_URL
#
# Installs Debian's PostgreSQL server when it is missing, creates a data
# directory under /tmp, starts the server on 127.0.0.1:$EVOMEM_PG_PORT
# (default 54329) with trust authentication on loopback only and TLS on (a
# throwaway CA and a certificate for localhost and 127.0.0.1, made with
# openssl in the data directory), and creates the database `evomem_test`.
# Prints `export` lines for the URL and, for a server it started, the CA
# file (EVOMEM_TEST_PG_CA: the TLS test needs it); everything else goes to
# stderr. Stop it with: pg_ctl -D <datadir> stop (the path is printed).
set -euo pipefail

port="${EVOMEM_PG_PORT:-54329}"
db="evomem_test"
log() { echo "ci-postgres: $*" >&2; }

find_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

bindir="$(find_bin || true)"
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  log "PostgreSQL server not found; installing Debian's package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y postgresql >&2
  bindir="$(find_bin)"
fi
log "using $bindir"

# Run a command as the unprivileged `postgres` user when we are root
# (initdb refuses to run as root).
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    if ! id postgres >/dev/null 2>&1; then
      useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres >&2
    fi
    if command -v runuser >/dev/null 2>&1; then
      runuser -u postgres -- "$@"
    else
      su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
  else
    "$@"
  fi
}
pg_user="$(if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi)"

if "$bindir/pg_isready" -h 127.0.0.1 -p "$port" -q 2>/dev/null; then
  log "a server already answers on 127.0.0.1:$port; reusing it"
  # A server this script started keeps its CA in its data directory: name
  # it again, so that the TLS test runs against a reused server too.
  running_dir="$(as_pg "$bindir/psql" -h 127.0.0.1 -p "$port" -U "$pg_user" -d postgres -tAc 'SHOW data_directory' 2>/dev/null || true)"
  if [ -n "$running_dir" ] && [ -f "$running_dir/ca.pem" ]; then
    pg_ca="$running_dir/ca.pem"
  fi
else
  datadir="$(mktemp -d /tmp/evomem-pg.XXXXXX)"
  chmod 700 "$datadir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$datadir"; fi
  as_pg "$bindir/initdb" -D "$datadir" -U "$pg_user" --auth=trust --encoding=UTF8 --locale=C.UTF-8 >&2 \
    || as_pg "$bindir/initdb" -D "$datadir" -U "$pg_user" --auth=trust --encoding=UTF8 --no-locale >&2
  # TLS: a CA of our own and a server certificate it signs, valid for the
  # names the tests connect to.
  tls_opts=""
  if command -v openssl >/dev/null 2>&1; then
    (
      cd "$datadir"
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3 \
        -subj "/CN=evomem test CA" -keyout ca.key -out ca.pem \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=localhost" -keyout server.key -out server.csr
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >server.ext
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 \
        -extfile server.ext -out server.crt
      chmod 600 server.key ca.key
      if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres server.key server.crt; fi
    ) >&2 2>&1
    tls_opts="-c ssl=on -c ssl_cert_file=$datadir/server.crt -c ssl_key_file=$datadir/server.key"
    pg_ca="$datadir/ca.pem"
  else
    log "openssl not found: the server runs without TLS (the TLS test fails under CI)"
  fi
  as_pg "$bindir/pg_ctl" -D "$datadir" -l "$datadir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $datadir -c fsync=on -c synchronous_commit=on $tls_opts" start >&2
  log "started; data directory $datadir (stop: $bindir/pg_ctl -D $datadir stop)"
fi

if ! as_pg "$bindir/psql" -h 127.0.0.1 -p "$port" -U "$pg_user" -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
  as_pg "$bindir/createdb" -h 127.0.0.1 -p "$port" -U "$pg_user" "$db" >&2
fi
log "database $db ready"
echo "export EVOMEM_TEST_PG_URL=postgres://$pg_user@127.0.0.1:$port/$db"
if [ -n "${pg_ca:-}" ]; then
  echo "export EVOMEM_TEST_PG_CA=$pg_ca"
fi
