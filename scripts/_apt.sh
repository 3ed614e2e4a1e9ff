# shellcheck shell=bash
# Sourced by scripts/_venv.sh and scripts/_services.sh (not executable on its own).
#
# apt_install PACKAGE... : install Debian packages (root and apt-get needed).
# The package lists may be stale on a fresh machine: on failure it runs
# apt-get update and retries once. --reinstall also repairs a package whose
# files are gone (half-removed). Checks nothing afterwards: the caller does.
#
# A busy machine (another apt-get or dpkg running, e.g. unattended-upgrades at
# boot) holds apt's locks: the installs wait for dpkg's lock up to
# $APT_LOCK_TIMEOUT seconds (default 600; apt's DPkg::Lock::Timeout, which
# prints "Waiting for cache lock: ... held by process N"), and so does apt-get
# update for the package lists' lock (which apt 2.6 does not wait for itself:
# retried every 2 s, saying so, until the same deadline).

APT_LOCK_TIMEOUT="${APT_LOCK_TIMEOUT:-600}"

_apt_log() { printf '%s\n' "apt: $*" >&2; }

# apt-get update, waiting (up to APT_LOCK_TIMEOUT) while another process holds
# the lists' lock; "$@" is the apt-get command line before the subcommand.
_apt_update() {
    local deadline=$((SECONDS + APT_LOCK_TIMEOUT)) err said=0
    err="$(mktemp "${TMPDIR:-/tmp}/triggerhook-apt.XXXXXX")"
    while true; do
        if "$@" update 2>"$err" >&2; then
            rm -f "$err"
            return 0
        fi
        if ! grep -q 'Could not get lock' "$err" || ((SECONDS >= deadline)); then
            cat "$err" >&2
            rm -f "$err"
            return 1
        fi
        if ((!said)); then
            _apt_log "waiting up to ${APT_LOCK_TIMEOUT}s for apt's lock" \
                "($(grep -m1 'Could not get lock' "$err" | sed 's/^E: //'))"
            said=1
        fi
        sleep 2
    done
}

apt_install() {
    if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        _apt_log "error: cannot install $* here (needs root and apt-get); install Debian's" \
            "packages: $*"
        return 1
    fi
    _apt_log "installing Debian's $* (apt-get install -y $*; waits up to" \
        "${APT_LOCK_TIMEOUT}s for dpkg's lock while another apt-get or dpkg runs)"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0
        -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT")
    local install=(install --reinstall --no-install-recommends "$@")
    if ! "${apt[@]}" "${install[@]}" >&2; then
        _apt_log "apt-get install failed; running apt-get update and retrying"
        _apt_update "${apt[@]}" && "${apt[@]}" "${install[@]}" >&2 || {
            _apt_log "error: could not install $*"
            return 1
        }
    fi
}
