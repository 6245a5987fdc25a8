# Sourced by bench/lib.sh and bench/fleet.sh: a work directory, the processes to stop on
# exit (append PIDs to `pids`), a free port, a process's CPU ticks (user + sys, in
# CLK_TCK units), and where a profile's binaries are.
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Where cargo puts a profile's binaries: under the target triple when CARGO_BUILD_TARGET is
# set (the static build scripts/test.sh makes), else directly under target/.
build_dir() { echo "target/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}$1"; }
