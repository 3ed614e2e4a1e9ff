# shellcheck shell=bash
# Sourced by scripts/test and scripts/run (not executable on its own).
#
# Creates .venv with `python3 -m venv` if it is missing and installs the project
# in editable mode with its dev extras, pinned by constraints.txt: first the
# client distribution (./client, triggerhook-client), which the daemon depends
# on and which is on no index — installed, it satisfies that dependency, so pip
# never looks it up. The install is skipped while the stamp file
# .venv/.installed is newer than pyproject.toml, client/pyproject.toml,
# constraints.txt and the gRPC API's .proto (client/triggerhook_client/grpc/),
# and the messages generated from it are there, so repeated runs cost nothing.
#
# Expects the current directory to be the repository root. Honours $PYTHON
# (default python3) for creating the venv. Sets VENV and VENV_BIN.

VENV="${VENV:-.venv}"
VENV_BIN="$VENV/bin"

# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

_venv_log() { printf '%s\n' "venv: $*" >&2; }

# mysqlclient (the fast database driver, a dev dependency) compiles against the
# MariaDB or MySQL client library, which it finds through pkg-config.
_ensure_mysqlclient_build() {
    if command -v pkg-config >/dev/null 2>&1 \
        && { pkg-config --exists libmariadb || pkg-config --exists mysqlclient; }; then
        return 0
    fi
    _venv_log "mysqlclient compiles against libmariadb-dev, which is missing"
    apt_install libmariadb-dev pkg-config gcc
}

ensure_venv() {
    local python="${PYTHON:-python3}"
    local stamp="$VENV/.installed"

    if [[ ! -x "$VENV_BIN/python" ]] || ! "$VENV_BIN/python" -c '' 2>/dev/null; then
        if ! command -v "$python" >/dev/null 2>&1; then
            _venv_log "error: '$python' not found; install Python >= 3.11 or set PYTHON"
            return 1
        fi
        _venv_log "creating $VENV with $("$python" --version 2>&1)"
        rm -rf "$VENV"
        "$python" -m venv "$VENV" || {
            _venv_log "error: '$python -m venv $VENV' failed (on Debian: apt-get install python3-venv)"
            return 1
        }
    fi

    # The .proto too: the client's editable install generates the gRPC API's
    # messages from it (client/setup.py), so a changed .proto means an install again.
    local grpc=client/triggerhook_client/grpc
    if [[ -f "$stamp" && "$stamp" -nt pyproject.toml && "$stamp" -nt client/pyproject.toml \
        && "$stamp" -nt constraints.txt && "$stamp" -nt "$grpc/triggerhook.proto" \
        && -f "$grpc/triggerhook_pb2.py" ]]; then
        return 0
    fi

    _ensure_mysqlclient_build || return 1
    _venv_log "installing triggerhook-client and triggerhook[dev] into $VENV (pinned by constraints.txt)"
    rm -f "$stamp"
    "$VENV_BIN/pip" install -q -c constraints.txt -e ./client || {
        _venv_log "error: pip install of the client (./client) failed"
        return 1
    }
    "$VENV_BIN/pip" install -q -c constraints.txt -e '.[dev]' || {
        _venv_log "error: pip install failed"
        return 1
    }
    touch "$stamp"
}
