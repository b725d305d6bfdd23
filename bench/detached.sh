# One long command across several device calls (the device README: a call lasts at most 10 minutes, the
# machine stays warm 30 s after one ends and is held at most 30 minutes). The command runs in its own
# process session (setsid), which outlives the call that starts it; each later call waits for it a while
# and copies its files out. A resumable bench cut at a call's end lost the jobs in flight there: KernelBench
# L2 #59 and #55 after 476 and 486 s of work each (H200, 2026-12-01), verified again from scratch next call.
#
#   bash bench/detached.sh start DIR CMD [ARG...]   # CMD's output goes to DIR/log, its exit status to DIR/rc
#   bash bench/detached.sh wait SECONDS DIR         # until DIR/rc exists or SECONDS pass; then the log's tail
#
# Exit status of `wait`: CMD's once it ended, 3 while it still runs (another call should wait again).
set -u
case "${1:-}" in
  start)
    [ $# -ge 3 ] || { echo "usage: $0 start DIR CMD [ARG...]" >&2; exit 2; }
    dir=$2; shift 2
    if [ -e "$dir/pid" ] && [ ! -e "$dir/rc" ]; then echo "detached: $dir already runs pid $(cat "$dir/pid")" >&2; exit 2; fi
    mkdir -p "$dir" && rm -f "$dir/rc" "$dir/log"
    setsid nohup bash -c '"$@"; echo $? > "$0/rc"' "$dir" "$@" > "$dir/log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    echo "detached: pid $(cat "$dir/pid"), log $dir/log"
    ;;
  wait)
    [ $# -eq 3 ] || { echo "usage: $0 wait SECONDS DIR" >&2; exit 2; }
    limit=$2 dir=$3 t0=$SECONDS
    [ -e "$dir/pid" ] || { echo "detached: nothing was started in $dir" >&2; exit 2; }
    while [ ! -e "$dir/rc" ] && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 2; done
    tail -c 4000 "$dir/log"
    if [ -e "$dir/rc" ]; then
      echo "detached: ended, exit $(cat "$dir/rc"), after waiting $((SECONDS - t0)) s"
      exit "$(cat "$dir/rc")"
    fi
    echo "detached: still running after $((SECONDS - t0)) s"
    exit 3
    ;;
  *) echo "usage: $0 start DIR CMD [ARG...] | wait SECONDS DIR" >&2; exit 2 ;;
esac
