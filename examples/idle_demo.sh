#!/usr/bin/env bash
# idle_demo - runs idle_server and idle_client together and prints the verdict.
#
#   idle_demo [--valgrind] [--bindir DIR] [server options] [client options]
#
# Server options (passed to idle_server): --threads N --idle-ms T --tick-ms T
#   --request-timeout-ms R --heartbeat-ms H.  Defaults: 4 threads, T 1000 ms,
#   tick 10 ms, R = T/4, heartbeat 1000 ms.
# Anything else goes to idle_client: --connections C (default 2000),
#   --active-pct P (25), --interval-ms X (T/4), --duration-ms D (3T),
#   --ramp-ms M (T/2), --slack-ms S (500), --progress-ms P (1000), --seed N.
# --valgrind runs both under valgrind memcheck (leaks and errors fail the run).
# --emulator CMD runs both through CMD (words split on blanks), e.g. the
#   qemu-user wrapper of a cross build (CMAKE_CROSSCOMPILING_EMULATOR).
# --bindir: where idle_server and idle_client are (default: beside this script).
#
# The server listens on an ephemeral port of 127.0.0.1; the client drives it,
# sends it SIGTERM at the end and checks that every connection is closed. The
# server's own output (its shutdown report and leak check) follows the
# client's summary. Exit status: 0 only if the client says PASS and the server
# exits 0 (clean shutdown, nothing leaked).
set -uo pipefail

bindir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
valgrind=0
emulator=()
server_args=()
client_args=()
while [ $# -gt 0 ]; do
    case $1 in
        --valgrind) valgrind=1 ;;
        --emulator) read -r -a emulator <<<"$2"; shift ;;
        --bindir) bindir=$2; shift ;;
        --threads | --idle-ms | --tick-ms | --request-timeout-ms | --heartbeat-ms)
            server_args+=("$1" "$2"); shift ;;
        -h | --help) sed -n '2,/^# exits 0/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) client_args+=("$1") ;;
    esac
    shift
done

for exe in idle_server idle_client; do
    if [ ! -x "$bindir/$exe" ]; then
        echo "idle_demo: $bindir/$exe not found (build the examples, or pass --bindir)" >&2
        exit 2
    fi
done

wrap=()
if [ "$valgrind" = 1 ]; then
    command -v valgrind >/dev/null || { echo "idle_demo: valgrind not installed" >&2; exit 2; }
    # shellcheck disable=SC2054 # the commas are inside valgrind's option values
    wrap=(valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect
          --errors-for-leak-kinds=definite,indirect --track-fds=no)
fi
if [ ${#emulator[@]} -gt 0 ]; then
    if [ "$valgrind" = 1 ]; then
        echo "idle_demo: --valgrind and --emulator do not combine" >&2
        exit 2
    fi
    # qemu-user runs the program in its own process: the server's pid below
    # is the emulator's, and the signals sent to it reach the program.
    wrap=("${emulator[@]}")
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idle_demo.XXXXXX")
server_pid=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${wrap[@]}" "$bindir/idle_server" --port 0 --port-file "$tmp/port" "${server_args[@]}" \
    >"$tmp/server.log" 2>&1 &
server_pid=$!

# The server writes its port once it listens (valgrind takes a while to start).
for _ in $(seq 600); do
    [ -s "$tmp/port" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "idle_demo: the server did not start:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ ! -s "$tmp/port" ]; then
    echo "idle_demo: the server did not listen within 60 s" >&2
    exit 1
fi
port=$(cat "$tmp/port")
head -n 1 "$tmp/server.log"

"${wrap[@]}" "$bindir/idle_client" --port "$port" --server-pid "$server_pid" "${client_args[@]}"
client_status=$?

# The client sent the server SIGTERM at its end; if it could not (it failed
# early), do it here. Then give the server time to stop (longer under valgrind).
waited=0
while kill -0 "$server_pid" 2>/dev/null && [ "$waited" -lt 20 ]; do
    sleep 0.1
    waited=$((waited + 1))
done
kill -TERM "$server_pid" 2>/dev/null
limit=$((valgrind ? 1200 : 300))
while kill -0 "$server_pid" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
    sleep 0.1
    waited=$((waited + 1))
done
if kill -0 "$server_pid" 2>/dev/null; then
    echo "idle_demo: the server did not stop after SIGTERM; killing it" >&2
    kill -KILL "$server_pid" 2>/dev/null
fi
wait "$server_pid"
server_status=$?
server_pid=
echo
tail -n +2 "$tmp/server.log"

if [ "$client_status" -eq 0 ] && [ "$server_status" -eq 0 ]; then
    echo "idle_demo: PASS"
    exit 0
fi
echo "idle_demo: FAIL (client exit status $client_status, server exit status $server_status)"
exit 1
