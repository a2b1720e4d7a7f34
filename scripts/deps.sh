#!/usr/bin/env bash
# Installs what the build and the tests need and is missing: Debian's
# redis-server (the stand's server, with redis-cli and redis-benchmark),
# nutcracker (twemproxy, for the benchmarks), gcc (the stand's module), and
# the Go modules. Safe to run again; it changes nothing that is present.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
command -v nutcracker >/dev/null 2>&1 || need+=(nutcracker)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "deps: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts a redis-server on 6379 (and a nutcracker) after install;
  # the stand and the benchmarks start their own, so the system services are
  # stopped to keep the machine quiet.
  $sudo service redis-server stop >/dev/null 2>&1 || true
  $sudo service nutcracker stop >/dev/null 2>&1 || true
fi
go mod download
