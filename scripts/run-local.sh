#!/usr/bin/env bash
# make run: a local module node from the stand on 127.0.0.1:6390 and the proxy
# in front of it on 127.0.0.1:6380, with deploy/examples/local.yaml.
# Both stop on Ctrl-C. Data, logs and the audit log live under .run/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .run/node
go build -o bin/emqnode ./stand/cmd/emqnode

./bin/emqnode --role module --port 6390 --dir "$PWD/.run/node" --no-brand >.run/node.log 2>&1 &
node_pid=$!
trap 'kill $node_pid 2>/dev/null; wait $node_pid 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do
  redis-cli -p 6390 ping >/dev/null 2>&1 && break
  kill -0 $node_pid 2>/dev/null || { cat .run/node.log; exit 1; }
  sleep 0.1
done

cat <<MSG
module node: 127.0.0.1:6390 (log .run/node.log)
emqproxy:    127.0.0.1:6380  ->  connect with: redis-cli -p 6380
audit log:   .run/audit.log
admin:       http://127.0.0.1:9121/readyz  /metrics
Ctrl-C stops both.
MSG
./bin/emqproxy serve --config deploy/examples/local.yaml
