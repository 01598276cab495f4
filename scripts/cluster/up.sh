#!/usr/bin/env bash
# Starts N `rewind serve` replicas on loopback and one load balancer (HAProxy or nginx) in front of
# them with a generated configuration: conversation affinity by consistent hashing, health checks
# on /health, retries on a refused connection or a 503. See docs/deploy.md.
#
#   scripts/cluster/up.sh --replicas N --port PORT [--balancer haproxy|nginx]
#                         [--replica-base-port P] -- SERVE_ARGS...
#
# Replica i (1..N) listens on 127.0.0.1:(P+i) (P: PORT by default) with --replica-id ri; the
# balancer on 127.0.0.1:PORT. Returns once every replica and the balancer answer /health with 200,
# having printed `replica PID PORT` for each replica, then `balancer PID URL`. Runs the `rewind`
# on PATH, or $REWIND. State (configuration, logs, pid files) in $REWIND_CLUSTER_DIR, default
# ${TMPDIR:-/tmp}/rewind-cluster-PORT. Stop it all with scripts/cluster/down.sh PORT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

replicas="" port="" balancer=haproxy base=""
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --balancer) balancer=${2:?}; shift 2 ;;
    --replica-base-port) base=${2:?}; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
if ! [[ "$replicas" =~ ^[0-9]+$ ]] || [ "$replicas" -lt 1 ] || [ "$replicas" -gt 64 ]; then die "--replicas must be 1..64"; fi
if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1024 ] || [ "$port" -gt 65535 ]; then die "--port must be 1024..65535"; fi
base=${base:-$port}
if ! [[ "$base" =~ ^[0-9]+$ ]] || [ $((base + replicas)) -gt 65535 ]; then die "--replica-base-port out of range"; fi
case "$balancer" in
  haproxy) command -v haproxy >/dev/null || die "haproxy is not installed (Debian: apt-get install haproxy)" ;;
  nginx) command -v nginx >/dev/null || die "nginx is not installed (Debian: apt-get install nginx-light)" ;;
  *) die "--balancer must be haproxy or nginx" ;;
esac
for a in "$@"; do
  case "$a" in --host|--host=*|--port|--port=*|--replica-id|--replica-id=*) die "$a is set by up.sh" ;; esac
done
rewind=$(rewind_bin)

dir=$(cluster_dir "$port")
if [ -f "$dir/balancer.pid" ] && is_ours "$(cat "$dir/balancer.pid")" "$balancer"; then
  die "a cluster already runs on port $port (scripts/cluster/down.sh $port)"
fi
ports=("$port")
for ((i = 1; i <= replicas; ++i)); do ports+=($((base + i))); done
for p in "${ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port $p is in use"; fi
done
rm -rf "$dir"
mkdir -p "$dir"
echo "$rewind" >"$dir/rewind-bin"
echo "$balancer" >"$dir/balancer"
printf '%s\n' "${ports[@]:1}" >"$dir/replica-ports"
if [ $# -gt 0 ]; then printf '%s\0' "$@"; fi >"$dir/serve-args"

# What is started is stopped again if up.sh fails half way.
# shellcheck disable=SC2154 # status is assigned in the trap itself
trap 'status=$?; [ $status -eq 0 ] || "$here/down.sh" "$port" >/dev/null 2>&1 || true; exit $status' EXIT

pids=()
for ((i = 1; i <= replicas; ++i)); do pids+=("$(start_replica "$dir" "$i")"); done
for ((i = 1; i <= replicas; ++i)); do
  wait_healthy "${ports[i]}" 120 "${pids[i - 1]}" ||
    die "replica $i (port ${ports[i]}) did not become healthy; its log, $dir/replica-$i.log:
$(tail -n 20 "$dir/replica-$i.log")"
done

source "$here/balancers.sh"
if [ "$balancer" = haproxy ]; then
  haproxy_config "$port" "${ports[@]:1}" >"$dir/haproxy.cfg"
  haproxy -c -q -f "$dir/haproxy.cfg" >"$dir/balancer.log" 2>&1 || die "bad configuration: $(cat "$dir/balancer.log")"
  setsid haproxy -db -f "$dir/haproxy.cfg" </dev/null >>"$dir/balancer.log" 2>&1 &
else
  mkdir -p "$dir/nginx-temp"
  nginx_config "$port" "$dir" "${ports[@]:1}" >"$dir/nginx.conf"
  setsid nginx -e stderr -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' </dev/null >>"$dir/balancer.log" 2>&1 &
fi
bpid=$!
echo "$bpid" >"$dir/balancer.pid"
wait_healthy "$port" 20 "$bpid" || die "the balancer did not start; $dir/balancer.log:
$(tail -n 20 "$dir/balancer.log")"

for ((i = 1; i <= replicas; ++i)); do echo "replica ${pids[i - 1]} ${ports[i]}"; done
echo "balancer $bpid http://127.0.0.1:$port"
