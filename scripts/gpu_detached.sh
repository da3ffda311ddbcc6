#!/usr/bin/env bash
# A GPU job that outlives the device call that starts it, so that one engine start serves
# several back-to-back calls (a call may run 10 minutes; the machine stays while calls follow
# each other within 30 s). The device tool keeps a process that started a new session (setsid)
# until the machine goes back; everything else dies when the call returns.
#   gpu_detached.sh start NAME COMMAND...   start COMMAND in its own session, in a copy of the
#                                           current folder (the next call's working tree may
#                                           replace it), OUT pointed at
#                                           $PB_DETACHED_ROOT/NAME/out, its output in .../log
#   gpu_detached.sh watch NAME SECONDS      follow its log for SECONDS at most (less once it
#                                           ends), then copy what it wrote under its OUT (a
#                                           partial record: verify.ab engine checkpoints after
#                                           every round) and its log into this call's $OUT
# Example (the penalty cost, B=256 beside the series on one 80 GB GPU; each line one device call):
#   bash scripts/gpu_detached.sh start b256 env PB_ENGINES_IN_TURN=1 PB_DEADLINE=1500 \
#     PB_VARIANTS='series patched' PB_SHAPES=256x2048 bash scripts/gpu_penalties_ab.sh TAG; \
#     bash scripts/gpu_detached.sh watch b256 $((570-SECONDS))
#   bash scripts/gpu_detached.sh watch b256 570
# Exit status of watch: 0 ended with status 0, 10 still running, 11 ended with another status
# (printed), 12 vanished without one (killed, or the machine was not the same).
set -uo pipefail
root=${PB_DETACHED_ROOT:-/root/pb-detached}
verb=${1:-} name=${2:-}
usage="usage: gpu_detached.sh start NAME COMMAND... | watch NAME SECONDS"
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "$usage (NAME: letters, digits . _ -)" >&2; exit 2; }
dir=$root/$name

running() {  # its session leader alive (not a zombie) and no exit status written yet
  local pid state
  pid=$(cat "$dir/pid" 2>/dev/null) && [ -n "$pid" ] && [ ! -f "$dir/rc" ] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ]
}

start() {
  [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
  if running; then
    echo "gpu_detached: $name is running already (pid $(cat "$dir/pid")): watch it" >&2
    exit 3
  fi
  # The job runs in a copy of this folder: the next call's working tree may replace it.
  local mb; mb=$(du -sm . | cut -f1)
  if [ "$mb" -gt "${PB_DETACHED_MAX_MB:-1024}" ]; then
    echo "gpu_detached: $PWD holds $mb MB, more than PB_DETACHED_MAX_MB (1024) to copy" >&2
    exit 4
  fi
  rm -rf "$dir" && mkdir -p "$dir/out"  # an earlier job of this name, ended: replaced
  printf '%q ' "$@" > "$dir/command"
  cp -a "$PWD/." "$dir/tree" || { echo "gpu_detached: could not copy $PWD" >&2; exit 4; }
  # the session leader writes its own pid (setsid may fork, so $! need not be it)
  (cd "$dir/tree" && OUT=$dir/out exec setsid bash -c 'echo $$ > "$0/pid"
    "$@" > "$0/log" 2>&1 < /dev/null; echo $? > "$0/rc"' "$dir" "$@") < /dev/null > /dev/null 2>&1 &
  for _ in $(seq 50); do [ -s "$dir/pid" ] && break; sleep 0.1; done
  [ -s "$dir/pid" ] || { echo "gpu_detached: $name did not start" >&2; exit 4; }
  echo "gpu_detached: started $name (pid $(cat "$dir/pid"), a session of its own):" \
    "$(cat "$dir/command")"
}

watch() {
  local seconds=${1:-} shown=0 lines
  [[ "$seconds" =~ ^[0-9]+$ ]] || { echo "$usage" >&2; exit 2; }
  [ -f "$dir/pid" ] || { echo "gpu_detached: no job $name on this machine ($dir)" >&2; exit 12; }
  local end=$((SECONDS + seconds))
  while :; do
    lines=$(wc -l < "$dir/log" 2>/dev/null || echo 0)
    [ "$lines" -gt "$shown" ] && sed -n "$((shown + 1)),${lines}p" "$dir/log" && shown=$lines
    running && [ "$SECONDS" -lt "$end" ] || break
    sleep 2
  done
  sed -n "$((shown + 1)),\$p" "$dir/log" 2>/dev/null
  if [ -n "${OUT:-}" ]; then  # what the job wrote so far comes back with this call
    mkdir -p "$OUT/gpu" && cp -p "$dir"/out/gpu/* "$OUT/gpu/" 2>/dev/null
    cp -p "$dir/log" "$OUT/gpu/detached-$name.log" 2>/dev/null
  fi
  if [ -f "$dir/rc" ]; then
    local rc; rc=$(cat "$dir/rc")
    echo "gpu_detached: $name ended with status $rc"
    [ "$rc" = 0 ] && exit 0 || exit 11
  elif running; then
    echo "gpu_detached: $name still running; watch it again in the next call"
    exit 10
  fi
  echo "gpu_detached: $name vanished without an exit status (killed?)" >&2
  exit 12
}

case "$verb" in
  start) shift 2; start "$@" ;;
  watch) watch "${3:-}" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
