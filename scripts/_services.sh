# shellcheck shell=bash
# Sourced by scripts/test and scripts/run (not executable on its own).
#
# ensure_services: make sure MariaDB and RabbitMQ answer, starting local ones
# if they are down, and installing Debian's mariadb-server or rabbitmq-server
# first when missing (as root with apt-get; elsewhere it names the packages).
# A fresh MariaDB gets what the tests and the defaults expect: root over TCP
# with no password. A service on another host is only probed, never started.
# ensure_influxdb (scripts/test only): the same for InfluxDB 1.x, which the
# metrics tests write to; installs Debian's influxdb package when missing.
# ensure_spin (scripts/test only): installs Debian's spin (and gcc) when missing.
# ensure_libfaketime (scripts/test only): installs Debian's libfaketime when
# its library is missing (the clock-skew test runs a daemon under it).
# ensure_chromium (scripts/test only): installs Debian's chromium when
# /usr/bin/chromium is missing (the web view's tests drive it with Playwright).
# ensure_prometheus (scripts/test only): installs Debian's prometheus when
# missing and checks that a test instance of it starts.
#
#   TRIGGERHOOK_MYSQL_HOST  / TRIGGERHOOK_MYSQL_PORT  default 127.0.0.1 / 3306
#   TRIGGERHOOK_AMQP_HOST   / TRIGGERHOOK_AMQP_PORT   default 127.0.0.1 / 5672
#   TRIGGERHOOK_INFLUX_HOST / TRIGGERHOOK_INFLUX_PORT default 127.0.0.1 / 8086
#   SERVICE_START_TIMEOUT                             seconds, default 60
#
# The MariaDB probe uses PyMySQL from the venv (so source _venv.sh and call
# ensure_venv first); it falls back to mariadb-admin when that is unavailable.

# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

MYSQL_HOST="${TRIGGERHOOK_MYSQL_HOST:-127.0.0.1}"
MYSQL_PORT="${TRIGGERHOOK_MYSQL_PORT:-3306}"
AMQP_HOST="${TRIGGERHOOK_AMQP_HOST:-127.0.0.1}"
AMQP_PORT="${TRIGGERHOOK_AMQP_PORT:-5672}"
INFLUX_HOST="${TRIGGERHOOK_INFLUX_HOST:-127.0.0.1}"
INFLUX_PORT="${TRIGGERHOOK_INFLUX_PORT:-8086}"
SERVICE_START_TIMEOUT="${SERVICE_START_TIMEOUT:-60}"

MARIADBD=/usr/sbin/mariadbd
INFLUXD=/usr/bin/influxd
INFLUX_CONFIG=/etc/influxdb/influxdb.conf # Debian's
INFLUX_PIDFILE=/run/influxdb/influxd.pid   # the one Debian's init script uses

_svc_log() { printf '%s\n' "services: $*" >&2; }

_is_local_host() {
    case "$1" in
        127.0.0.1 | localhost | ::1) return 0 ;;
        *) return 1 ;;
    esac
}

_tcp_open() { # host port
    # shellcheck disable=SC2016 # $1/$2 expand in the child bash, on purpose
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# Exit status: 0 reachable, 1 not reachable (worth starting / waiting), 2 the
# server answers but something else is wrong (message printed; don't wait).
_mysql_probe() {
    local py="${VENV_BIN:-.venv/bin}/python"
    if [[ -x "$py" ]] && "$py" -c 'import pymysql' 2>/dev/null; then
        "$py" - "$MYSQL_HOST" "$MYSQL_PORT" <<'PY'
import sys

import pymysql

host, port = sys.argv[1], int(sys.argv[2])
try:
    pymysql.connect(host=host, port=port, user="root", password="", connect_timeout=2).close()
except pymysql.err.OperationalError as exc:
    code = exc.args[0] if exc.args else None
    if code in (2003, 2006, 2013):  # can't connect / gone away / lost: not (yet) serving
        sys.exit(1)
    print(f"services: MariaDB at {host}:{port} answers but: {exc}", file=sys.stderr)
    # Access denied still proves the server is up; the tests will say more.
    sys.exit(0 if code == 1045 else 2)
PY
    elif command -v mariadb-admin >/dev/null 2>&1; then
        mariadb-admin ping --connect-timeout=2 -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot \
            >/dev/null 2>&1
    else
        _tcp_open "$MYSQL_HOST" "$MYSQL_PORT"
    fi
}

ensure_mariadb() {
    local rc=0
    _mysql_probe || rc=$?
    case $rc in
        0) return 0 ;;
        2) return 1 ;;
    esac

    if ! _is_local_host "$MYSQL_HOST"; then
        _svc_log "error: MariaDB is not reachable at $MYSQL_HOST:$MYSQL_PORT (not local, not starting it)"
        return 1
    fi
    local fresh=0
    if [[ ! -x "$MARIADBD" ]]; then
        _apt_install mariadb-server "$MARIADBD" || {
            _svc_log "(or start MariaDB 10.11+ yourself, root without a password on" \
                "$MYSQL_HOST:$MYSQL_PORT, or point TRIGGERHOOK_MYSQL_HOST/PORT at one)"
            return 1
        }
        fresh=1
    fi
    if ! command -v start-stop-daemon >/dev/null 2>&1; then
        _svc_log "error: MariaDB is not reachable at $MYSQL_HOST:$MYSQL_PORT and cannot be" \
            "started here (start-stop-daemon missing); start it yourself"
        return 1
    fi

    if start-stop-daemon --status --exec "$MARIADBD"; then
        _svc_log "mariadbd is running but not answering on $MYSQL_HOST:$MYSQL_PORT yet; waiting"
    else
        _svc_log "MariaDB is down at $MYSQL_HOST:$MYSQL_PORT; starting $MARIADBD"
    fi
    # mariadbd needs its runtime directory (pid file, socket); it vanishes on reboot.
    if [[ ! -d /run/mysqld ]] && id mysql >/dev/null 2>&1; then
        install -d -o mysql -g mysql /run/mysqld || true
    fi
    if ! start-stop-daemon --start --oknodo --quiet --background --exec "$MARIADBD"; then
        _svc_log "error: start-stop-daemon could not start $MARIADBD"
        return 1
    fi

    local deadline=$((SECONDS + SERVICE_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        rc=0
        _mysql_probe || rc=$?
        case $rc in
            0)
                _svc_log "MariaDB is up"
                if ((fresh)); then _mariadb_open_root || return 1; fi
                return 0
                ;;
            2) return 1 ;;
        esac
        sleep 1
    done
    _svc_log "error: MariaDB did not answer on $MYSQL_HOST:$MYSQL_PORT within" \
        "${SERVICE_START_TIMEOUT}s; see its error log (journal or" \
        "/var/log/mysql) and try: mariadb-admin ping -h$MYSQL_HOST -uroot"
    return 1
}

# A MariaDB this script just installed: Debian's root logs in by its Unix
# socket only; the project's defaults and tests use root over TCP with no
# password, as on the project's machines. Never done to an existing server.
_mariadb_open_root() {
    _svc_log "letting root log in over TCP without a password (a fresh, local server)"
    mariadb -uroot -e "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR \
        mysql_native_password USING PASSWORD('')" || {
        _svc_log "error: could not set up root on the new MariaDB"
        return 1
    }
}

_rabbitmq_ready() { # quick: port open and (where we can ask) the app has booted
    _tcp_open "$AMQP_HOST" "$AMQP_PORT" || return 1
    if command -v rabbitmqctl >/dev/null 2>&1; then
        rabbitmqctl -q -t 5 await_startup >/dev/null 2>&1 || return 1
    fi
}

ensure_rabbitmq() {
    local local_host=0
    _is_local_host "$AMQP_HOST" && local_host=1

    if _tcp_open "$AMQP_HOST" "$AMQP_PORT"; then
        # The listener can be open before the broker has finished booting.
        if ((local_host)) && command -v rabbitmqctl >/dev/null 2>&1; then
            if ! rabbitmqctl -q -t "$SERVICE_START_TIMEOUT" await_startup >/dev/null 2>&1; then
                _svc_log "warning: port $AMQP_PORT is open but 'rabbitmqctl await_startup'" \
                    "failed (not our node, or no Erlang cookie access?); carrying on"
            fi
        fi
        return 0
    fi

    if ((!local_host)); then
        _svc_log "error: RabbitMQ is not reachable at $AMQP_HOST:$AMQP_PORT (not local, not starting it)"
        return 1
    fi
    if ! command -v rabbitmq-server >/dev/null 2>&1; then
        _apt_install rabbitmq-server /usr/sbin/rabbitmq-server || {
            _svc_log "(or start RabbitMQ 3.10+ yourself, guest/guest on" \
                "$AMQP_HOST:$AMQP_PORT, or point TRIGGERHOOK_AMQP_HOST/PORT at one)"
            return 1
        }
        # Debian's package may have started the broker already.
        if _rabbitmq_ready; then
            _svc_log "RabbitMQ is up (started by the package)"
            return 0
        fi
    fi

    local log="${TMPDIR:-/tmp}/triggerhook-rabbitmq-start.log"
    : >"$log"
    if command -v rabbitmqctl >/dev/null 2>&1 && rabbitmqctl -q -t 5 await_startup >/dev/null 2>&1; then
        # Don't start a second node: this one may still be opening its listeners,
        # or listens elsewhere (then we time out with the message below).
        _svc_log "a RabbitMQ node is running but $AMQP_HOST:$AMQP_PORT is closed; waiting"
    else
        _svc_log "RabbitMQ is down at $AMQP_HOST:$AMQP_PORT; starting rabbitmq-server -detached"
        # Detach fully so the broker never holds our stdout/stderr (CI would wait on it).
        local setsid=()
        command -v setsid >/dev/null 2>&1 && setsid=(setsid)
        if ! "${setsid[@]}" rabbitmq-server -detached </dev/null >"$log" 2>&1; then
            _svc_log "error: 'rabbitmq-server -detached' failed:"
            cat "$log" >&2
            return 1
        fi
    fi

    local deadline=$((SECONDS + SERVICE_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if _rabbitmq_ready; then
            _svc_log "RabbitMQ is up"
            return 0
        fi
        sleep 1
    done
    _svc_log "error: RabbitMQ did not come up on $AMQP_HOST:$AMQP_PORT within" \
        "${SERVICE_START_TIMEOUT}s; try 'rabbitmq-diagnostics status' and see /var/log/rabbitmq"
    if [[ -s "$log" ]]; then cat "$log" >&2; fi
    return 1
}

# 0: GET /ping answers 204 (InfluxDB 1.x and 2.x both do). Plain bash, no curl.
_influx_ping() {
    # shellcheck disable=SC2016 # $1/$2 expand in the child bash, on purpose
    timeout 3 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        printf "GET /ping HTTP/1.0\r\nHost: %s\r\n\r\n" "$1" >&3
        read -r _ code _ <&3
        [[ "$code" == 204 ]]' _ "$INFLUX_HOST" "$INFLUX_PORT" 2>/dev/null
}

# Install the Debian package $1 (root and apt-get); $2 names the missing file
# in messages. Checks nothing afterwards: see _apt_install.
_apt_get_install() {
    local package=$1 binary=$2
    _svc_log "$binary is missing"
    apt_install "$package"
}

# Install a Debian package that provides the executable $2 (root and apt-get).
_apt_install() {
    local package=$1 binary=$2
    _apt_get_install "$package" "$binary" || return 1
    [[ -x "$binary" ]] || {
        _svc_log "error: the $package package is installed but $binary is missing"
        return 1
    }
}

_influx_install() {
    _apt_install influxdb "$INFLUXD" || {
        _svc_log "(or point TRIGGERHOOK_INFLUX_HOST/PORT at a running InfluxDB 1.x)"
        return 1
    }
}

# ensure_spin (scripts/test only): the Spin model checker and the C compiler
# it needs, for the protocol model (models/, tests/model/).
ensure_spin() {
    [[ -x /usr/bin/gcc ]] || _apt_install gcc /usr/bin/gcc || return 1
    [[ -x /usr/bin/spin ]] || _apt_install spin /usr/bin/spin || return 1
}

# ensure_libfaketime (scripts/test only): Debian's libfaketime, which
# tests/integration/test_clock_skew.py preloads (LD_PRELOAD) into a daemon to
# run it with a wrong wall clock. _libfaketime prints the library's path.
_libfaketime() {
    local lib
    for lib in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1; do
        [[ -f "$lib" ]] && printf '%s\n' "$lib" && return 0
    done
    return 1
}

ensure_libfaketime() {
    _libfaketime >/dev/null && return 0
    # Not _apt_install: it checks for an executable, and a shared library is
    # installed 0644; its path (/usr/lib/<multiarch>/faketime/) is checked here.
    _apt_get_install libfaketime /usr/lib/'*'/faketime/libfaketime.so.1 || return 1
    _libfaketime >/dev/null || {
        _svc_log "error: the libfaketime package is installed but" \
            "/usr/lib/*/faketime/libfaketime.so.1 is missing (dpkg -L libfaketime)"
        return 1
    }
}

# ensure_chromium (scripts/test only): Debian's chromium, the headless browser
# tests/integration/test_web_view.py drives through Playwright (launched by
# path; Playwright's own browser downloads are never used).
CHROMIUM=/usr/bin/chromium

ensure_chromium() {
    [[ -x "$CHROMIUM" ]] || _apt_install chromium "$CHROMIUM" || return 1
}

# ensure_prometheus (scripts/test only): Debian's prometheus, which
# tests/integration/test_prometheus_grafana.py runs (a server of its own per
# test, scraping that test's daemon). Installed when missing; then a test
# instance (its own config and data directory under /tmp, a free port) must
# answer GET /-/ready and is stopped again, so that a broken install fails
# here rather than in the middle of pytest.
PROMETHEUS=/usr/bin/prometheus

# 0: GET http://127.0.0.1:$1$2 answers 200. Plain bash, no curl.
_http_200() {
    # shellcheck disable=SC2016 # $1/$2 expand in the child bash, on purpose
    timeout 3 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
        read -r _ code _ <&3
        [[ "$code" == 200 ]]' _ "$1" "$2" 2>/dev/null
}

_free_port() { # a port the kernel just handed out and took back
    local py="${VENV_BIN:-.venv/bin}/python"
    [[ -x "$py" ]] || py=python3
    "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ensure_prometheus() {
    [[ -x "$PROMETHEUS" ]] || _apt_install prometheus "$PROMETHEUS" || return 1
    local dir port pid ready=0
    dir="$(mktemp -d "${TMPDIR:-/tmp}/triggerhook-prometheus.XXXXXX")"
    port="$(_free_port)" || return 1
    printf '%s\n' "global: {scrape_interval: 1s}" "scrape_configs:" \
        "  - {job_name: self, static_configs: [{targets: ['127.0.0.1:$port']}]}" \
        >"$dir/prometheus.yml"
    "$PROMETHEUS" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
        --web.listen-address="127.0.0.1:$port" </dev/null >"$dir/log" 2>&1 &
    pid=$!
    local deadline=$((SECONDS + SERVICE_START_TIMEOUT))
    while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
        if _http_200 "$port" /-/ready; then
            ready=1
            break
        fi
        sleep 0.5
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if ((!ready)); then
        _svc_log "error: $PROMETHEUS did not answer GET /-/ready on 127.0.0.1:$port within" \
            "${SERVICE_START_TIMEOUT}s; its log:"
        tail -n 20 "$dir/log" >&2
        rm -rf "$dir"
        return 1
    fi
    _svc_log "Prometheus works ($("$PROMETHEUS" --version 2>&1 | head -n 1))"
    rm -rf "$dir"
}

# Start influxd the way Debian's init script does (user influxdb, its pid
# file), in the background, its log in /var/log/influxdb/influxd.log.
_influx_start() {
    local user=() log=/var/log/influxdb/influxd.log
    if id influxdb >/dev/null 2>&1; then
        user=(--chuid influxdb:influxdb)
        install -d -o influxdb -g influxdb /run/influxdb /var/log/influxdb /var/lib/influxdb
        # A data directory left by an influxd run as root would stop this one.
        if [[ -n "$(find /var/lib/influxdb ! -user influxdb -print -quit)" ]]; then
            _svc_log "giving /var/lib/influxdb to user influxdb (files owned by another user)"
            chown -R influxdb:influxdb /var/lib/influxdb
        fi
    else
        install -d /run/influxdb /var/log/influxdb
    fi
    _svc_log "starting $INFLUXD -config $INFLUX_CONFIG (log: $log)"
    # Reporting off (no network here); HTTP only on the configured address.
    if ! INFLUXDB_REPORTING_DISABLED=true INFLUXDB_HTTP_BIND_ADDRESS="$INFLUX_HOST:$INFLUX_PORT" \
        start-stop-daemon --start --oknodo --quiet --background --no-close "${user[@]}" \
        --pidfile "$INFLUX_PIDFILE" --exec "$INFLUXD" -- \
        -pidfile "$INFLUX_PIDFILE" -config "$INFLUX_CONFIG" </dev/null >>"$log" 2>&1; then
        _svc_log "error: start-stop-daemon could not start $INFLUXD; see $log"
        return 1
    fi
}

ensure_influxdb() {
    _influx_ping && return 0
    if ! _is_local_host "$INFLUX_HOST"; then
        _svc_log "error: InfluxDB is not reachable at $INFLUX_HOST:$INFLUX_PORT (not local, not starting it)"
        return 1
    fi
    if ! command -v start-stop-daemon >/dev/null 2>&1; then
        _svc_log "error: InfluxDB is down at $INFLUX_HOST:$INFLUX_PORT and start-stop-daemon" \
            "is missing; start InfluxDB 1.x yourself"
        return 1
    fi
    local started=$SECONDS
    if [[ ! -x "$INFLUXD" ]]; then
        _influx_install || return 1
        _influx_ping && {
            _svc_log "InfluxDB is up (started by the package), $((SECONDS - started))s"
            return 0
        }
    fi
    if start-stop-daemon --status --pidfile "$INFLUX_PIDFILE" --exec "$INFLUXD"; then
        _svc_log "influxd is running but not answering on $INFLUX_HOST:$INFLUX_PORT yet; waiting"
    else
        _svc_log "InfluxDB is down at $INFLUX_HOST:$INFLUX_PORT"
        _influx_start || return 1
    fi

    local deadline=$((SECONDS + SERVICE_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if _influx_ping; then
            _svc_log "InfluxDB is up ($("$INFLUXD" version 2>/dev/null)), $((SECONDS - started))s"
            return 0
        fi
        sleep 0.5
    done
    _svc_log "error: InfluxDB did not answer GET http://$INFLUX_HOST:$INFLUX_PORT/ping within" \
        "${SERVICE_START_TIMEOUT}s; see /var/log/influxdb/influxd.log"
    tail -n 20 /var/log/influxdb/influxd.log >&2 2>/dev/null || true
    return 1
}

ensure_services() {
    ensure_mariadb || return 1
    ensure_rabbitmq || return 1
}
