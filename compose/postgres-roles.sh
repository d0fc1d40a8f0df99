#!/usr/bin/env bash
# One PostgreSQL login per service, each owning its own schema and nothing else: a flaw in one service (the console's
# pages, accounts' queries) cannot read or change another's tables (fulfillment's wallets, its webhook secrets).
#
#   iap_accounts -> schema accounts    iap_catalog -> schema catalog
#   iap_fulfillment -> schema fulfillment    iap_console -> schema console
#
# Each login may connect to the database and create its schema (a service makes its own at first start), is no
# superuser, and gets no rights on another's schema. Runs as a superuser through psql: in the postgres image's
# first start (/docker-entrypoint-initdb.d, with POSTGRES_USER and POSTGRES_DB), from compose/up.sh, or by hand on a
# server you run (PGHOST, PGPORT, PGUSER, PGPASSWORD as psql reads them; POSTGRES_DB names the database, default iap).
# The passwords: IAP_POSTGRES_ACCOUNTS_PASSWORD, IAP_POSTGRES_CATALOG_PASSWORD, IAP_POSTGRES_FULFILLMENT_PASSWORD and
# IAP_POSTGRES_CONSOLE_PASSWORD (a login without one is not made); they reach psql through its environment, never its
# command line (`ps` shows that), and the server logs none of these statements. Idempotent: run again, it sets the
# passwords, and hands a schema made before by another login (the superuser, before 2026-11-30; or a restore of a
# dump taken then) to its service with all it holds. It makes each service's schema itself, so no login can take
# another's name first. Needs a real superuser (not a managed service's administrator), and takes CONNECT on the
# database away from PUBLIC: grant it to any other login that needs it (monitoring, a pooler).
set -euo pipefail

db=${POSTGRES_DB:-iap}
args=(-v ON_ERROR_STOP=1 -q --no-psqlrc --dbname "$db")
[[ -n ${POSTGRES_USER:-} ]] && args+=(--username "$POSTGRES_USER")

made=0
for service in accounts catalog fulfillment console; do
  var=IAP_POSTGRES_${service^^}_PASSWORD
  password=${!var:-}
  [[ -n $password ]] || continue
  IAP_ROLE_PASSWORD=$password psql "${args[@]}" -v role="iap_$service" -v schema="$service" -v db="$db" <<'SQL'
SET log_statement = 'none';
SET log_min_error_statement = 'panic';
\getenv password IAP_ROLE_PASSWORD
SELECT format('CREATE ROLE %I', :'role') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
ALTER ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'password';
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, CREATE, TEMPORARY ON DATABASE :"db" TO :"role";
CREATE SCHEMA IF NOT EXISTS :"schema" AUTHORIZATION :"role";
-- A schema another login made: handed over with its tables (their sequences and triggers go with them) and functions.
SELECT format('ALTER SCHEMA %I OWNER TO %I', nspname, :'role') FROM pg_namespace
  WHERE nspname = :'schema' AND nspowner <> (SELECT oid FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER TABLE %I.%I OWNER TO %I', schemaname, tablename, :'role') FROM pg_tables
  WHERE schemaname = :'schema' AND tableowner <> :'role' \gexec
SELECT format('ALTER FUNCTION %s OWNER TO %I', p.oid::regprocedure, :'role') FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :'schema' AND p.proowner <> (SELECT oid FROM pg_roles WHERE rolname = :'role') \gexec
SQL
  made=$((made + 1))
done
echo "postgres-roles: $made service login(s) in database $db"
