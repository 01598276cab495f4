#!/usr/bin/env bash
# Stops the cluster that scripts/cluster/up.sh started on PORT: the balancer first (it stops
# accepting and lets the requests it carries finish), then every replica with SIGTERM (each drains:
# running requests finish, up to its --shutdown-timeout); what is still alive after 30 s gets
# SIGKILL. Removes the cluster's state directory unless KEEP_LOGS=1.
#
#   scripts/cluster/down.sh PORT
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
port=${1:-}
[[ "$port" =~ ^[0-9]+$ ]] || die "usage: down.sh PORT"
dir=$(cluster_dir "$port")
[ -d "$dir" ] || die "no cluster on port $port ($dir does not exist)"
balancer=$(cat "$dir/balancer" 2>/dev/null || echo haproxy)

# The balancer: HAProxy's soft stop is SIGUSR1, nginx's graceful one SIGQUIT.
bpid=$(cat "$dir/balancer.pid" 2>/dev/null || true)
if is_ours "$bpid" "$balancer"; then
  if [ "$balancer" = nginx ]; then kill -QUIT "$bpid"; else kill -USR1 "$bpid"; fi
  wait_exit "$bpid" 30 || kill -KILL "$bpid" 2>/dev/null || true
fi
pids=()
for f in "$dir"/replica-*.pid; do
  [ -e "$f" ] || continue
  pid=$(cat "$f")
  if is_ours "$pid" replica-id; then kill -TERM "$pid"; pids+=("$pid"); fi
done
for pid in "${pids[@]}"; do
  wait_exit "$pid" 30 || { echo "rewind cluster: replica $pid did not stop in 30 s: SIGKILL" >&2; kill -KILL "$pid" 2>/dev/null || true; }
done
if [ "${KEEP_LOGS:-0}" != 1 ]; then rm -rf "$dir"; fi
echo "stopped the cluster on port $port"
