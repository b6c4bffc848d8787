#!/usr/bin/env bash
# Installs the Debian packages the tests need, when they are missing.
set -euo pipefail
need=()
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
/usr/bin/python3 -c 'import mockupdb' >/dev/null 2>&1 || need+=(python3-mockupdb)
/usr/bin/python3 -c 'import mongomock' >/dev/null 2>&1 || need+=(python3-mongomock)
# The operator console's browser tests (test/console): Debian's chromium, driven by playwright-core.
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
