# shellcheck shell=bash
# Sourced by scripts/_venv.sh and scripts/_services.sh (not executable on its own).
#
# apt_install PACKAGE... : install Debian packages (root and apt-get needed).
# The package lists may be stale on a fresh machine: on failure it runs
# apt-get update and retries once. --reinstall also repairs a package whose
# files are gone (half-removed). Checks nothing afterwards: the caller does.

_apt_log() { printf '%s\n' "apt: $*" >&2; }

apt_install() {
    if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        _apt_log "error: cannot install $* here (needs root and apt-get); install Debian's" \
            "packages: $*"
        return 1
    fi
    _apt_log "installing Debian's $* (apt-get install -y $*)"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0)
    local install=(install --reinstall --no-install-recommends "$@")
    if ! "${apt[@]}" "${install[@]}" >&2; then
        _apt_log "apt-get install failed; running apt-get update and retrying"
        "${apt[@]}" update >&2 && "${apt[@]}" "${install[@]}" >&2 || {
            _apt_log "error: could not install $*"
            return 1
        }
    fi
}
