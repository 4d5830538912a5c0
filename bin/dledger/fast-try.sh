#!/usr/bin/env bash
# Start or stop a name server and the 3-node DLedger broker group of conf/dledger/ on
# 127.0.0.1, then send and consume a few sample messages.
#
#   bin/dledger/fast-try.sh start [--data DIR]   build, start, wait for a master, sample, leave running
#   bin/dledger/fast-try.sh stop  [--data DIR]   stop what `start` started (pid files)
#   bin/dledger/fast-try.sh status [--data DIR]  cluster list and DLedger group state
#
# DIR defaults to /tmp/rmqstore (the store root of the conf files). With --data the conf
# files are copied to DIR/conf with their store paths rewritten to DIR/node0X.
# Pid files and logs live in DIR/run.
# FAST_TRY_BIN_DIR=DIR: use the binaries in DIR and skip the build (tests set it to their
# already-built target dir so they do not contend for cargo's build lock).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CONF_DIR="$ROOT/conf/dledger"
DEFAULT_DATA=/tmp/rmqstore
NAMESRV_ADDR=127.0.0.1:9876
NODES=(n0 n1 n2)
TOPIC=FastTryTopic

usage() {
    echo "usage: $0 start|stop|status [--data DIR]" >&2
    exit 2
}

[ $# -ge 1 ] || usage
CMD="$1"
shift
DATA="$DEFAULT_DATA"
DATA_GIVEN=0
while [ $# -gt 0 ]; do
    case "$1" in
    --data)
        [ $# -ge 2 ] || usage
        DATA="$2"
        DATA_GIVEN=1
        shift 2
        ;;
    --data=*)
        DATA="${1#--data=}"
        DATA_GIVEN=1
        shift
        ;;
    *) usage ;;
    esac
done
mkdir -p "$DATA"
DATA="$(cd "$DATA" && pwd)"
RUN="$DATA/run"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="${FAST_TRY_BIN_DIR:-$TARGET_DIR/debug}"

# pid_alive FILE NAME: the pid in FILE runs a process whose command line mentions NAME.
pid_alive() {
    local file="$1" name="$2" pid
    [ -f "$file" ] || return 1
    pid="$(cat "$file" 2>/dev/null || true)"
    [ -n "$pid" ] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$name"
}

# started_alive FILE: the pid in FILE, a child this run just started, has not exited. Only
# whether it runs: right after `nohup ... &` the child may not have exec'd its program yet
# (its command line is still this script's), which pid_alive would take for an exit.
started_alive() {
    local pid
    pid="$(cat "$1" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # An exited child not yet reaped is a zombie (state Z after the command name).
    [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" != Z ]
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

conf_value() { # conf_value FILE KEY
    sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*//p" "$1" | tail -n 1 | tr -d '\r' | sed 's/[[:space:]]*$//'
}

conf_file() { # conf_file NODE -> the conf file brokers use
    if [ "$DATA_GIVEN" = 1 ]; then
        echo "$DATA/conf/broker-$1.conf"
    else
        echo "$CONF_DIR/broker-$1.conf"
    fi
}

mqadmin() { "$BIN/mqadmin" -n "$NAMESRV_ADDR" "$@"; }

any_running() {
    pid_alive "$RUN/namesrv.pid" mqnamesrv && return 0
    for n in "${NODES[@]}"; do
        pid_alive "$RUN/broker-$n.pid" mqbroker && return 0
    done
    return 1
}

show_status() {
    echo "== mqadmin clusterList"
    mqadmin clusterList || true
    echo "== mqadmin dledgerStatus"
    mqadmin dledgerStatus --peers "$(conf_value "$(conf_file n0)" dLegerPeers)" || true
}

stop_all() {
    local stopped=0 pid
    for name in "${NODES[@]/#/broker-}" namesrv; do
        local file="$RUN/$name.pid" bin=mqbroker
        [ "$name" = namesrv ] && bin=mqnamesrv
        if pid_alive "$file" "$bin"; then
            pid="$(cat "$file")"
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 100); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then
                echo "$name (pid $pid) ignored SIGTERM for 10 s, sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
            fi
            echo "stopped $name (pid $pid)"
            stopped=$((stopped + 1))
        fi
        rm -f "$file"
    done
    [ "$stopped" -gt 0 ] || echo "nothing was running (pid files in $RUN)"
}

start_all() {
    for n in "${NODES[@]}"; do
        [ -f "$CONF_DIR/broker-$n.conf" ] || {
            echo "ERROR: $CONF_DIR/broker-$n.conf is missing" >&2
            exit 1
        }
    done
    if any_running; then
        echo "The group is already running (pid files in $RUN); nothing started."
        show_status
        echo "Stop it with: $0 stop$([ "$DATA_GIVEN" = 1 ] && echo " --data $DATA")"
        exit 0
    fi

    mkdir -p "$RUN"
    if [ "$DATA_GIVEN" = 1 ]; then
        mkdir -p "$DATA/conf"
        for n in "${NODES[@]}"; do
            local src="$CONF_DIR/broker-$n.conf" dst="$DATA/conf/broker-$n.conf" node
            node="$(basename "$(conf_value "$src" storePathRootDir)")"
            sed -e "s#^\([[:space:]]*storePathRootDir[[:space:]]*=\).*#\1$DATA/$node#" \
                -e "s#^\([[:space:]]*storePathCommitLog[[:space:]]*=\).*#\1$DATA/$node/commitlog#" \
                "$src" >"$dst"
        done
    fi

    # Every port the group needs must be free.
    local busy=() ports=(9876) conf port peers
    for n in "${NODES[@]}"; do
        conf="$(conf_file "$n")"
        port="$(conf_value "$conf" listenPort)"
        ports+=("$port" "$((port - 2))")
    done
    peers="$(conf_value "$(conf_file n0)" dLegerPeers)"
    for p in $(echo "$peers" | tr ';' '\n' | sed -n 's/.*:\([0-9][0-9]*\)$/\1/p'); do
        ports+=("$p")
    done
    for p in "${ports[@]}"; do
        if port_in_use "$p"; then busy+=("$p"); fi
    done
    if [ "${#busy[@]}" -gt 0 ]; then
        echo "ERROR: port(s) already in use on 127.0.0.1: ${busy[*]} (another RocketMQ or an earlier run? try: $0 stop, or: ss -ltnp)" >&2
        exit 1
    fi

    if [ -n "${FAST_TRY_BIN_DIR:-}" ]; then
        echo "== using prebuilt binaries in $BIN (FAST_TRY_BIN_DIR; no build)"
    else
        echo "== building (cargo build --bins, dev profile)"
        (cd "$ROOT" && cargo build --bins -p namesrv -p broker -p tools)
    fi
    for b in mqnamesrv mqbroker mqadmin mqbench; do
        [ -x "$BIN/$b" ] || {
            echo "ERROR: $BIN/$b was not built" >&2
            exit 1
        }
    done

    echo "== starting mqnamesrv on $NAMESRV_ADDR (log $RUN/namesrv.log)"
    nohup "$BIN/mqnamesrv" --listen "$NAMESRV_ADDR" >"$RUN/namesrv.log" 2>&1 &
    echo $! >"$RUN/namesrv.pid"
    for _ in $(seq 1 100); do
        grep -q "boot success" "$RUN/namesrv.log" 2>/dev/null && break
        started_alive "$RUN/namesrv.pid" || {
            echo "ERROR: mqnamesrv exited; see $RUN/namesrv.log" >&2
            tail -n 5 "$RUN/namesrv.log" >&2
            exit 1
        }
        sleep 0.1
    done

    for n in "${NODES[@]}"; do
        conf="$(conf_file "$n")"
        echo "== starting mqbroker $n -c $conf (log $RUN/broker-$n.log)"
        nohup "$BIN/mqbroker" -c "$conf" >"$RUN/broker-$n.log" 2>&1 &
        echo $! >"$RUN/broker-$n.pid"
    done

    echo "== waiting for a master (BID 0) in mqadmin clusterList"
    local ok=0
    for _ in $(seq 1 120); do
        for n in "${NODES[@]}"; do
            started_alive "$RUN/broker-$n.pid" || {
                echo "ERROR: broker $n exited; see $RUN/broker-$n.log" >&2
                tail -n 5 "$RUN/broker-$n.log" >&2
                exit 1
            }
        done
        if mqadmin clusterList 2>/dev/null | awk 'NR > 1 && $3 == "0" { found = 1 } END { exit !found }'; then
            ok=1
            break
        fi
        sleep 0.5
    done
    if [ "$ok" != 1 ]; then
        echo "ERROR: no master registered after 60 s; logs in $RUN" >&2
        exit 1
    fi

    echo "== sending 3 sample messages to $TOPIC"
    local sent=0
    for _ in $(seq 1 20); do
        if mqadmin sendMessage -t "$TOPIC" -p "Hello DLedger" -k fast-try -c TagA --count 3; then
            sent=1
            break
        fi
        sleep 0.5
    done
    [ "$sent" = 1 ] || echo "WARNING: sample sends failed; see $RUN/broker-*.log" >&2
    echo "== consuming them back"
    mqadmin consumeMessage -t "$TOPIC" -c 3 || echo "WARNING: sample consume failed" >&2

    show_status
    cat <<MSG

The name server ($NAMESRV_ADDR) and the DLedger group RaftNode00 keep running.
  logs and pid files:  $RUN
  cluster view:        $BIN/mqadmin -n $NAMESRV_ADDR clusterList
  group state:         $0 status$([ "$DATA_GIVEN" = 1 ] && echo " --data $DATA")
  benchmark:           $BIN/mqbench producer -n $NAMESRV_ADDR -t BenchmarkTest -d 30
  stop everything:     $0 stop$([ "$DATA_GIVEN" = 1 ] && echo " --data $DATA")
MSG
}

case "$CMD" in
start) start_all ;;
stop) stop_all ;;
status) show_status ;;
*) usage ;;
esac
