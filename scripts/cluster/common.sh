# shellcheck shell=bash
# Shared by up.sh, down.sh and roll.sh: where a cluster keeps its state, how a replica is started
# and how long to wait for it. Sourced, not run. Every wait is bounded in time.

# A cluster's state (configuration, logs, pid files, the replicas' arguments) lives in one
# directory per balancer port, so that down.sh and roll.sh need only the port.
cluster_dir() { echo "${REWIND_CLUSTER_DIR:-${TMPDIR:-/tmp}/rewind-cluster-$1}"; }

# Debian installs haproxy and nginx in /usr/sbin, outside a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"

die() { echo "rewind cluster: $*" >&2; exit 1; }

rewind_bin() {
  if [ -n "${REWIND:-}" ]; then echo "$REWIND"; return; fi
  command -v rewind || die "no rewind on PATH (or set REWIND=/path/to/rewind)"
}

# status_of PORT PATH: the HTTP status of GET PATH on 127.0.0.1:PORT, or 000 when nothing answers
# within 2 s. Bash's /dev/tcp, so that neither curl nor wget is needed.
status_of() {
  local line=""
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
    IFS= read -r -t 2 line <&3 && echo "$line"
  ) 2>/dev/null | awk '{print $2; found=1} END {if (!found) print "000"}'
}

# wait_healthy PORT SECONDS [PID]: until GET /health answers 200; fails after SECONDS, or at once
# when PID (the process that should answer) has exited.
wait_healthy() {
  local port=$1 deadline=$((SECONDS + $2)) pid=${3:-}
  while [ "$(status_of "$port" /health)" != 200 ]; do
    if [ -n "$pid" ] && ! alive "$pid"; then return 1; fi
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.1
  done
}

# alive PID: PID runs (a zombie, exited but not yet reaped by its parent, does not).
alive() { [ -e "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# wait_exit PID SECONDS: until PID has exited; fails after SECONDS.
wait_exit() {
  local deadline=$((SECONDS + $2))
  while alive "$1"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.05
  done
}

# is_ours PID NAME: PID is alive and its command line holds NAME (a pid file may outlive its
# process and the number be reused by another).
is_ours() { [ -n "$1" ] && alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"; }

# start_replica DIR INDEX: starts replica INDEX (1-based) of the cluster in DIR on its port with
# the saved arguments, in the background, its output in DIR/replica-INDEX.log; prints its PID.
start_replica() {
  local dir=$1 i=$2 port args=()
  port=$(sed -n "${i}p" "$dir/replica-ports")
  mapfile -d '' args <"$dir/serve-args"
  # setsid: the replica is not in the caller's process group, so a Ctrl-C in the shell that ran
  # up.sh does not reach it; down.sh stops it.
  setsid "$(cat "$dir/rewind-bin")" serve --host 127.0.0.1 --port "$port" --replica-id "r$i" "${args[@]}" \
    </dev/null >>"$dir/replica-$i.log" 2>&1 &
  echo $! >"$dir/replica-$i.pid"
  echo $!
}
