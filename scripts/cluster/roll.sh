#!/usr/bin/env bash
# Rolling restart of the cluster that scripts/cluster/up.sh started on PORT: one replica at a
# time gets SIGTERM (its /health turns 503, so the balancer takes it out; it finishes its running
# requests and exits), is started again with the same arguments (e.g. a new rewind binary: $REWIND
# or PATH, read again now), and must answer /health before the next one goes. With at least two
# replicas the balancer always has one to send requests to, and retries the ones that meet a
# replica on its way out: no request fails.
#
#   scripts/cluster/roll.sh PORT [SECONDS_TO_DRAIN (default 60)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
port=${1:-}
drain=${2:-60}
[[ "$port" =~ ^[0-9]+$ ]] || die "usage: roll.sh PORT [SECONDS_TO_DRAIN]"
dir=$(cluster_dir "$port")
[ -f "$dir/replica-ports" ] || die "no cluster on port $port ($dir)"
rewind_bin >"$dir/rewind-bin"
n=$(wc -l <"$dir/replica-ports")
# A restarted replica is back in the rotation after the balancer's next check of it.
settle=$(awk -v ms="${REWIND_CLUSTER_CHECK_MS:-500}" 'BEGIN { printf "%.3f", 2 * ms / 1000 }')
for ((i = 1; i <= n; ++i)); do
  port_i=$(sed -n "${i}p" "$dir/replica-ports")
  pid=$(cat "$dir/replica-$i.pid")
  if is_ours "$pid" replica-id; then
    kill -TERM "$pid"
    wait_exit "$pid" "$drain" || { echo "rewind cluster: replica $i did not drain in $drain s: SIGKILL" >&2; kill -KILL "$pid"; wait_exit "$pid" 5; }
  fi
  pid=$(start_replica "$dir" "$i")
  wait_healthy "$port_i" 120 "$pid" || die "replica $i did not come back; $dir/replica-$i.log:
$(tail -n 20 "$dir/replica-$i.log")"
  sleep "$settle"
  echo "replica $pid $port_i"
done
