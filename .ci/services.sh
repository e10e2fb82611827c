#!/usr/bin/env bash
# Make sure PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) are up for the tests:
# start them if installed, install them (Debian packages) if not; also Chromium and git.
set -uo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ensure_postgres() {
  port_open 5432 && return 0
  if ! ls /etc/postgresql >/dev/null 2>&1; then
    echo "ci: installing PostgreSQL"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  ver=$(ls /etc/postgresql | head -n1)
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba" 2>/dev/null; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba" 2>/dev/null || true
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 30); do port_open 5432 && break; sleep 1; done
  port_open 5432 || { echo "ci: PostgreSQL did not start"; return 1; }
  su postgres -c "psql -tc \"SELECT 1 FROM pg_database WHERE datname='test'\" | grep -q 1 || createdb test" || true
}

ensure_redis() {
  port_open 6379 && return 0
  if ! command -v redis-server >/dev/null; then
    echo "ci: installing Redis"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do port_open 6379 && break; sleep 1; done
  port_open 6379 || { echo "ci: Redis did not start"; return 1; }
}

# the dashboard tests drive Debian's Chromium through Playwright (never `playwright install`);
# crcr demo and the workflow tests need git
ensure_browser_and_git() {
  local missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  command -v git >/dev/null || missing+=(git)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "ci: installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

ensure_postgres && ensure_redis && ensure_browser_and_git
