#!/bin/sh
# The db service of the compose profile "replicas": Debian's PostgreSQL server, run as the
# postgres user, its cluster in the named volume mounted at /var/lib/postgresql/data.
#
# First start (no cluster yet): initdb into a temporary folder of the volume, create the role
# labeldp with the password $PGPASSWORD (stored as a SCRAM-SHA-256 verifier) and its database
# labeldp, allow that role password logins (scram-sha-256) from the container's own networks
# (pg_hba "samenet": the compose network), then move the cluster into place: a start
# interrupted half-way initialises again instead of serving a cluster without its role.
# Later starts keep the cluster (and its password: change it with ALTER ROLE, not the env file).
# The superuser postgres logs in only over the local socket, by peer authentication.
set -eu

VOLUME=/var/lib/postgresql/data
PGDATA="$VOLUME/pgdata"
ROLE=labeldp
DATABASE=labeldp

if [ "$(id -un)" != postgres ]; then
    echo "labeldp-postgres: run me as the postgres user (compose: user: postgres)" >&2
    exit 2
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${PGPASSWORD:-}" ]; then
        echo "labeldp-postgres: no cluster yet and PGPASSWORD is not set: put" \
            "PGPASSWORD=<a long random secret> in the env file (services/compose.env)" >&2
        exit 2
    fi
    staging="$VOLUME/pgdata.init"
    rm -rf "$staging"
    echo "labeldp-postgres: initdb $PGDATA (first start)"
    initdb --pgdata="$staging" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    # The role and database, on a server that listens on its socket only (PGPASSWORD stays in
    # the environment: psql reads it with \getenv, so it is on no command line).
    pg_ctl --pgdata="$staging" --options="-c listen_addresses=''" --wait --silent start
    psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --username=postgres --dbname=postgres \
        --set=role="$ROLE" --set=database="$DATABASE" <<'SQL'
\getenv password PGPASSWORD
SET password_encryption = 'scram-sha-256';
CREATE ROLE :"role" LOGIN PASSWORD :'password';
CREATE DATABASE :"database" OWNER :"role";
SQL
    pg_ctl --pgdata="$staging" --mode=fast --wait --silent stop
    printf '# labeldp: the role %s, with its password, from the compose network\n' "$ROLE" \
        >>"$staging/pg_hba.conf"
    printf 'host %s %s samenet scram-sha-256\n' "$DATABASE" "$ROLE" >>"$staging/pg_hba.conf"
    mv "$staging" "$PGDATA"
fi

# All the container's addresses: only the project's network reaches them (no port is published).
exec postgres -D "$PGDATA" -c listen_addresses='*' -c password_encryption=scram-sha-256
