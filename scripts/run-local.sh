#!/usr/bin/env bash
# make run: a local module node from the stand on 127.0.0.1:6390 and the proxy
# in front of it on 127.0.0.1:6380, with deploy/examples/local.yaml.
# Both stop on Ctrl-C. Data, logs and the audit log live under .run/.
# NODE_PORT moves the node (default 6390); every key of the proxy's
# configuration can be moved with its EMQPROXY_ variable (EMQPROXY_LISTEN,
# EMQPROXY_ADMIN_LISTEN, ...). NODE_SERVER runs the node on another server
# binary than Debian's redis-server, e.g. a valkey-server.
set -euo pipefail
NODE_PORT=${NODE_PORT:-6390}
server_args=()
if [ -n "${NODE_SERVER:-}" ]; then
  server_args=(--server "$NODE_SERVER")
fi
export EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS=127.0.0.1:$NODE_PORT
listen=${EMQPROXY_LISTEN:-127.0.0.1:6380}
admin=${EMQPROXY_ADMIN_LISTEN:-127.0.0.1:9121}
cd "$(dirname "$0")/.."
mkdir -p .run/node
go build -o bin/emqnode ./stand/cmd/emqnode

./bin/emqnode --role module --port "$NODE_PORT" --dir "$PWD/.run/node" --no-brand "${server_args[@]}" >.run/node.log 2>&1 &
node_pid=$!
trap 'kill $node_pid 2>/dev/null; wait $node_pid 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do
  redis-cli -p "$NODE_PORT" ping >/dev/null 2>&1 && break
  kill -0 $node_pid 2>/dev/null || { cat .run/node.log; exit 1; }
  sleep 0.1
done

cat <<MSG
module node: 127.0.0.1:$NODE_PORT on ${NODE_SERVER:-redis-server} (log .run/node.log)
emqproxy:    $listen  ->  connect with: redis-cli -p ${listen##*:}
audit log:   .run/audit.log
admin:       http://$admin/readyz  /metrics
Ctrl-C stops both.
MSG
./bin/emqproxy serve --config deploy/examples/local.yaml &
proxy_pid=$!
# Ctrl-C reaches both through the terminal; a plain SIGTERM to this script
# (a supervisor, timeout) is passed on, so neither outlives it.
trap 'kill -TERM $proxy_pid 2>/dev/null' INT TERM
wait $proxy_pid || wait $proxy_pid
