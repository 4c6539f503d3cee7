#!/usr/bin/env bash
# PostgreSQL's server programs (initdb, postgres, pg_ctl) for the tests that start a real database:
# found on PATH or in Debian's /usr/lib/postgresql/<version>/bin, else installed from Debian's
# `postgresql` package. Nothing is started here; the tests start their own throwaway cluster.
set -euo pipefail
found() {
  command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
if found; then
  exit 0
fi
echo "installing PostgreSQL (Debian package postgresql) for the tests..." >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "PostgreSQL is missing and this user cannot install it: run 'apt-get install -y postgresql' as root" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq postgresql >/dev/null
found || { echo "postgresql installed but initdb not found" >&2; exit 1; }
