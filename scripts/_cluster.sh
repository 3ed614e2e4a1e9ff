# shellcheck shell=bash
# Sourced by scripts/cluster (not executable on its own): the members of the
# local cluster, each started, stopped and probed on its own. Facts behind the
# settings: docs/operations.md, "Running on a cluster".

# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

CLUSTER_DIR="${TRIGGERHOOK_CLUSTER_DIR:-/var/tmp/triggerhook-cluster}"
CLUSTER_START_TIMEOUT_S="${CLUSTER_START_TIMEOUT_S:-180}"
PROXY_PORT=3310
galera_port() { echo $((3310 + $1)); }
gcomm_port() { echo $((4560 + $1)); }
rabbit_port() { echo $((5680 + $1)); }
daemon_port() { echo $((8090 + $1)); }
rabbit_node() { echo "rbt$1@localhost"; }
GALERA_LIB=/usr/lib/galera/libgalera_smm.so
RABBIT_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server

_cl_log() { printf '%s\n' "cluster: $*" >&2; }
_cl_die() {
    _cl_log "error: $*"
    exit 1
}

# -- the parts: packages, directories, pids ---------------------------------------------------------

ensure_cluster_packages() {
    local missing=()
    [[ -f "$GALERA_LIB" ]] || missing+=(galera-4)
    command -v mariadbd >/dev/null 2>&1 || [[ -x /usr/sbin/mariadbd ]] || missing+=(mariadb-server)
    [[ -x "$RABBIT_SERVER" ]] || missing+=(rabbitmq-server)
    command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
    command -v rsync >/dev/null 2>&1 || missing+=(rsync)
    command -v socat >/dev/null 2>&1 || missing+=(socat)
    if ((${#missing[@]})); then
        apt_install "${missing[@]}" || _cl_die "install ${missing[*]} and run this again"
    fi
}

# The pid in FILE if that process is alive (paused counts), else nothing.
_live_pid() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(<"$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

_pid_file() { # kind n
    case "$1" in
        galera) echo "$CLUSTER_DIR/galera$2/mysqld.pid" ;;
        rabbit) echo "$CLUSTER_DIR/rabbit$2/rabbit.pid" ;;
        daemon) echo "$CLUSTER_DIR/daemon$2/daemon.pid" ;;
    esac
}

member_pid() { _live_pid "$(_pid_file "$1" "$2")"; }

signal_member() { # kind n SIGNAL
    local pid
    pid="$(member_pid "$1" "$2")" || _cl_die "$1 $2 is not running"
    kill -s "$3" "$pid"
    _cl_log "$1 $2 (pid $pid): sent SIG$3"
}

# Wait until COMMAND succeeds, at most CLUSTER_START_TIMEOUT_S, and while
# process PID (the member started) lives; WHAT names it.
_wait_for() { # what pid command...
    local what="$1" pid="$2" deadline=$((SECONDS + CLUSTER_START_TIMEOUT_S))
    shift 2
    until "$@" 2>/dev/null; do
        ((SECONDS < deadline)) || _cl_die "$what: not up after ${CLUSTER_START_TIMEOUT_S} s"
        kill -0 "$pid" 2>/dev/null || _cl_die "$what: exited while starting"
        sleep 0.5 # polling a server's state: there is nothing to wait on
    done
}

# SIGTERM, then SIGKILL after TIMEOUT seconds; waits for the process to go.
_stop_pid() { # pid timeout_s what
    local pid="$1" deadline=$((SECONDS + $2))
    kill -s TERM "$pid" 2>/dev/null || return 0
    kill -s CONT "$pid" 2>/dev/null || true # a paused process cannot stop
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            _cl_log "$3: still running after $2 s, killing it"
            kill -s KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.2 # the process is not our child: no wait(1) on it
    done
}

# -- Galera -----------------------------------------------------------------------------------------

_galera_dir() { echo "$CLUSTER_DIR/galera$1"; }

_galera_config() { # n
    local n="$1" dir members="" i
    dir="$(_galera_dir "$n")"
    for i in 1 2 3; do members+="${members:+,}127.0.0.1:$(gcomm_port "$i")"; done
    cat >"$dir/my.cnf" <<EOF
[mysqld]
user=mysql
port=$(galera_port "$n")
bind-address=127.0.0.1
socket=$dir/mysqld.sock
datadir=$dir/data
pid-file=$dir/mysqld.pid
log-error=$dir/error.log
skip-name-resolve
innodb_buffer_pool_size=64M
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=$GALERA_LIB
wsrep_cluster_name=triggerhook
wsrep_cluster_address=gcomm://$members
wsrep_node_name=galera$n
wsrep_node_address=127.0.0.1
wsrep_provider_options="base_host=127.0.0.1;base_port=$(gcomm_port "$n");gmcast.listen_addr=tcp://127.0.0.1:$(gcomm_port "$n");ist.recv_addr=127.0.0.1:$((4570 + n));gcache.size=32M;evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S"
wsrep_sst_method=rsync
wsrep_sst_donor=$(_galera_donor "$n")
wsrep_sst_receive_address=127.0.0.1:$((4580 + n))
EOF
}

# An rsync state transfer holds FLUSH TABLES WITH READ LOCK on its donor for
# the copy: a donor HAProxy writes to stops every write meanwhile. Left to
# Galera, galera1 rejoining after a kill -9 (a full transfer: its state is
# unknown) picked galera2, the writer while it is down, every time (1.3-2 s
# of blocked writes here; in a slower machine's CI the writer failover's
# lateness lasted past its test slot). So each node's donor is one HAProxy
# does not write to then (it writes to galera1 while up, else galera2); the
# trailing comma lets Galera take any node when that one is down.
_galera_donor() { # n
    case "$1" in
        1 | 2) echo "galera3," ;;
        *) echo "galera2," ;;
    esac
}

galera_sql() { # n sql: as root over the node's socket
    mariadb --no-defaults -S "$(_galera_dir "$1")/mysqld.sock" -uroot -N -B -e "$2"
}

_galera_synced() { # n: part of the primary component and synced
    local state
    state="$(galera_sql "$1" "SHOW STATUS WHERE Variable_name IN
        ('wsrep_local_state', 'wsrep_ready', 'wsrep_cluster_status')" | sort | awk '{print $2}' |
        paste -sd' ')"
    [[ "$state" == "Primary 4 ON" ]]
}

_galera_running() { # how many nodes run
    local n count=0
    for n in 1 2 3; do member_pid galera "$n" >/dev/null && count=$((count + 1)); done
    echo "$count"
}

galera_start() { # n
    local n="$1" dir bootstrap=()
    dir="$(_galera_dir "$n")"
    member_pid galera "$n" >/dev/null && return 0
    mkdir -p "$dir"
    if [[ ! -d "$dir/data/mysql" ]]; then
        mariadb-install-db --no-defaults --datadir="$dir/data" --user=mysql --skip-test-db \
            >"$dir/install.log" 2>&1 || _cl_die "galera $n: mariadb-install-db failed ($dir/install.log)"
    fi
    _galera_config "$n"
    chown -R mysql:mysql "$dir"
    if [[ "$(_galera_running)" == 0 ]]; then
        # No node to join: this one starts the cluster. After a stop of every
        # node the latest state may be on another: this is a test cluster.
        bootstrap=(--wsrep-new-cluster)
        [[ -f "$dir/data/grastate.dat" ]] &&
            sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$dir/data/grastate.dat"
    fi
    _cl_log "galera $n: starting on port $(galera_port "$n") ${bootstrap[*]}"
    setsid nohup /usr/sbin/mariadbd --defaults-file="$dir/my.cnf" "${bootstrap[@]}" \
        >>"$dir/stdout.log" 2>&1 </dev/null &
    _wait_for "galera $n (see $dir/error.log)" $! _galera_synced "$n"
    _cl_log "galera $n: synced"
}

galera_stop() { # n
    local pid
    pid="$(member_pid galera "$1")" || return 0
    _stop_pid "$pid" 60 "galera $1"
    _cl_log "galera $1: stopped"
}

# Users over TCP: with skip-name-resolve a client on loopback is user@127.0.0.1.
# Replicated to the other nodes (DDL runs on all of them).
_galera_users() {
    galera_sql 1 "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
        GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
        CREATE USER IF NOT EXISTS 'haproxy'@'127.0.0.1';"
}

# -- HAProxy: one writer at a time ----------------------------------------------------------------------

_proxy_dir() { echo "$CLUSTER_DIR/haproxy"; }

# HAProxy's own mysql-check proves only that a node takes a login, which a
# node does while it is still joining (receiving state, answering every
# query with error 1047): a writer must be Synced (wsrep_local_state 4).
_proxy_check_script() { # file
    cat >"$1" <<'EOF'
#!/bin/sh
# HAProxy external-check: $3 $4 the server's address and port; 0 = up.
state="$(mariadb --no-defaults --connect-timeout=2 -h"$3" -P"$4" -uhaproxy -N -B \
    -e "SHOW STATUS LIKE 'wsrep_local_state'" 2>/dev/null | cut -f2)"
[ "$state" = 4 ]
EOF
    chmod 755 "$1"
}

proxy_start() {
    local dir
    dir="$(_proxy_dir)"
    _live_pid "$dir/haproxy.pid" >/dev/null && return 0
    mkdir -p "$dir"
    _proxy_check_script "$dir/galera-synced"
    # balance first + backups: every connection goes to galera1 while it is
    # up, else to the first backup up; sessions on a node marked down are cut,
    # and when a node comes back those on the backups are cut too, so that
    # writes go to one node at a time. Up means Synced (see above).
    cat >"$dir/haproxy.cfg" <<EOF
global
    maxconn 4000
    stats socket $dir/admin.sock mode 600 level admin
    external-check
    insecure-fork-wanted
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout check 3s
    retries 2
    option redispatch
listen galera
    bind 127.0.0.1:$PROXY_PORT
    balance first
    option external-check
    external-check path "/usr/bin:/bin"
    external-check command $dir/galera-synced
    default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions on-marked-up shutdown-backup-sessions
    server galera1 127.0.0.1:$(galera_port 1) check
    server galera2 127.0.0.1:$(galera_port 2) check backup
    server galera3 127.0.0.1:$(galera_port 3) check backup
EOF
    haproxy -c -q -f "$dir/haproxy.cfg" || _cl_die "haproxy: bad configuration $dir/haproxy.cfg"
    haproxy -f "$dir/haproxy.cfg" -D -p "$dir/haproxy.pid" >>"$dir/haproxy.log" 2>&1
    _wait_for "haproxy" "$(<"$dir/haproxy.pid")" _proxy_serves
    _cl_log "haproxy: port $PROXY_PORT"
}

_proxy_serves() {
    mariadb --no-defaults -h127.0.0.1 -P"$PROXY_PORT" -uroot -N -e 'SELECT 1' >/dev/null
}

proxy_stop() {
    local pid
    pid="$(_live_pid "$(_proxy_dir)/haproxy.pid")" || return 0
    _stop_pid "$pid" 10 haproxy
}

# Each server's state as HAProxy sees it: "galera1 UP" ...
proxy_servers() {
    echo "show stat" | socat - "UNIX-CONNECT:$(_proxy_dir)/admin.sock" 2>/dev/null |
        awk -F, '$1 == "galera" && $2 ~ /^galera/ {print $2, $18}'
}

# -- RabbitMQ ---------------------------------------------------------------------------------------

_rabbit_dir() { echo "$CLUSTER_DIR/rabbit$1"; }

# The node's environment: its own names, ports and files (never the default
# node's /etc/rabbitmq ones); HOME for the shared Erlang cookie.
_rabbit_env() { # n
    local n="$1" dir
    dir="$(_rabbit_dir "$n")"
    printf '%s\n' \
        HOME=/var/lib/rabbitmq \
        "RABBITMQ_NODENAME=$(rabbit_node "$n")" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
        "RABBITMQ_NODE_PORT=$(rabbit_port "$n")" \
        "RABBITMQ_DIST_PORT=$((25680 + n))" \
        ERL_EPMD_ADDRESS=127.0.0.1 \
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}" \
        "RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf" \
        "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf" \
        "RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config" \
        "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" \
        "RABBITMQ_MNESIA_BASE=$dir/mnesia" \
        "RABBITMQ_MNESIA_DIR=$dir/mnesia/$(rabbit_node "$n")" \
        "RABBITMQ_LOG_BASE=$dir/log" \
        "RABBITMQ_PID_FILE=$dir/rabbit.pid"
}

rabbitctl() { # n args...
    local n="$1"
    shift
    rabbitmqctl -q -n "$(rabbit_node "$n")" "$@"
}

rabbit_start() { # n
    local n="$1" dir joined=true env=()
    dir="$(_rabbit_dir "$n")"
    member_pid rabbit "$n" >/dev/null && return 0
    mkdir -p "$dir/log" "$dir/mnesia"
    [[ -d "$dir/mnesia/$(rabbit_node "$n")" ]] || joined=false
    : >"$dir/rabbitmq-env.conf"
    echo "[]." >"$dir/enabled_plugins"
    echo "[]." >"$dir/advanced.config"
    # A node cut off from the others' majority pauses (closes its clients'
    # connections, they move to the majority) until it is back with them,
    # instead of serving a second copy of the cluster (the default, ignore).
    printf '%s\n' "loopback_users.guest = true" "cluster_partition_handling = pause_minority" \
        >"$dir/rabbitmq.conf"
    chown -R rabbitmq:rabbitmq "$dir"
    mapfile -t env < <(_rabbit_env "$n")
    _cl_log "rabbit $n: starting $(rabbit_node "$n") on port $(rabbit_port "$n")"
    setsid nohup runuser -u rabbitmq -- env "${env[@]}" "$RABBIT_SERVER" \
        >>"$dir/stdout.log" 2>&1 </dev/null &
    _wait_for "rabbit $n (see $dir/log)" $! rabbitctl "$n" await_startup --timeout 5
    if [[ "$n" != 1 && "$joined" == false ]]; then
        # (Erlang's own error lines while the node is between apps go to the log.)
        {
            rabbitctl "$n" stop_app &&
                rabbitctl "$n" join_cluster "$(rabbit_node 1)" &&
                rabbitctl "$n" start_app
        } >>"$dir/join.log" 2>&1 || _cl_die "rabbit $n: could not join $(rabbit_node 1) ($dir/join.log)"
        _cl_log "rabbit $n: joined $(rabbit_node 1)"
    fi
}

rabbit_stop() { # n
    local pid
    pid="$(member_pid rabbit "$1")" || return 0
    _stop_pid "$pid" 60 "rabbit $1"
    _cl_log "rabbit $1: stopped"
}

# The running nodes as the first node that answers sees them.
rabbit_running_nodes() {
    local n
    for n in 1 2 3; do
        member_pid rabbit "$n" >/dev/null || continue
        rabbitctl "$n" cluster_status --formatter json 2>/dev/null |
            "$VENV_BIN/python" -c 'import json, sys; print(" ".join(json.load(sys.stdin)["running_nodes"]))' &&
            return 0
    done
    return 1
}

# -- the daemons ------------------------------------------------------------------------------------

cluster_database_url() { echo "mysql://root:@127.0.0.1:$PROXY_PORT/triggerhook"; }

# Every broker node, daemon N's own first (amqp_url takes a list).
cluster_amqp_urls() { # n
    local n="$1" i urls
    urls="amqp://guest:guest@127.0.0.1:$(rabbit_port "$n")/%2F"
    for i in 1 2 3; do
        ((i == n)) || urls+=" amqp://guest:guest@127.0.0.1:$(rabbit_port "$i")/%2F"
    done
    echo "$urls"
}

_daemon_env() { # n
    printf '%s\n' \
        "TRIGGERHOOK_DATABASE_URL=$(cluster_database_url)" \
        "TRIGGERHOOK_AMQP_URL=$(cluster_amqp_urls "$1")" \
        TRIGGERHOOK_AMQP_QUEUE_TYPE=quorum \
        "TRIGGERHOOK_HTTP_PORT=$(daemon_port "$1")" \
        "TRIGGERHOOK_INSTANCE_ID=cluster-$1"
}

_daemon_ready() { # n
    "$VENV_BIN/python" - "$(daemon_port "$1")" <<'PY'
import sys
import urllib.request

with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2) as answer:
    sys.exit(0 if answer.status == 200 else 1)
PY
}

daemon_start() { # n
    local n="$1" dir env=()
    dir="$CLUSTER_DIR/daemon$n"
    member_pid daemon "$n" >/dev/null && return 0
    mkdir -p "$dir"
    mapfile -t env < <(_daemon_env "$n")
    _cl_log "daemon $n: starting (HTTP $(daemon_port "$n"), log $dir/daemon.log)"
    setsid nohup env "${env[@]}" "$VENV_BIN/triggerhook" run >>"$dir/daemon.log" 2>&1 </dev/null &
    echo $! >"$dir/daemon.pid"
    _wait_for "daemon $n (see $dir/daemon.log)" $! _daemon_ready "$n"
}

daemon_stop() { # n
    local pid
    pid="$(member_pid daemon "$1")" || return 0
    _stop_pid "$pid" 30 "daemon $1"
    _cl_log "daemon $1: stopped"
}

# -- the whole cluster ------------------------------------------------------------------------------

cluster_up() { # daemons: true|false
    local n
    [[ $EUID -eq 0 ]] || _cl_die "run as root (the servers run as the mysql and rabbitmq users)"
    ensure_cluster_packages
    mkdir -p "$CLUSTER_DIR"
    chmod 755 "$CLUSTER_DIR"
    for n in 1 2 3; do galera_start "$n"; done
    _galera_users
    proxy_start
    for n in 1 2 3; do rabbit_start "$n"; done
    if [[ "$1" == true ]]; then
        ensure_venv
        env "TRIGGERHOOK_DATABASE_URL=$(cluster_database_url)" "$VENV_BIN/triggerhook" db init
        for n in 1 2 3; do daemon_start "$n"; done
    fi
    cluster_status
}

cluster_down() {
    local n
    for n in 1 2 3; do daemon_stop "$n"; done
    for n in 3 2 1; do rabbit_stop "$n"; done
    proxy_stop
    for n in 3 2 1; do galera_stop "$n"; done
    rm -rf "$CLUSTER_DIR"
    _cl_log "down: stopped, $CLUSTER_DIR removed"
}

cluster_status() {
    local kind n pid state
    for kind in galera rabbit daemon; do
        for n in 1 2 3; do
            if pid="$(member_pid "$kind" "$n")"; then
                state="$(ps -o state= -p "$pid" 2>/dev/null || true)"
                [[ "$state" == T* ]] && state="paused" || state="running"
                echo "$kind $n: $state (pid $pid)"
            else
                echo "$kind $n: down"
            fi
        done
    done
    if [[ "$(_galera_running)" != 0 ]]; then
        for n in 1 2 3; do
            member_pid galera "$n" >/dev/null || continue
            echo "galera cluster: size $(galera_sql "$n" "SHOW STATUS LIKE 'wsrep_cluster_size'" |
                awk '{print $2}') (as galera $n sees it)"
            break
        done
    fi
    proxy_servers | sed 's/^/haproxy: /' || true
    echo "rabbit cluster: $(rabbit_running_nodes || echo 'no node answers')"
}

cluster_env() {
    echo "TRIGGERHOOK_DATABASE_URL='$(cluster_database_url)'"
    echo "TRIGGERHOOK_AMQP_URL='$(cluster_amqp_urls 1)'"
    echo "TRIGGERHOOK_CLUSTER_HTTP_PORTS='$(daemon_port 1) $(daemon_port 2) $(daemon_port 3)'"
}
