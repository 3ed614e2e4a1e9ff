# shellcheck shell=bash
# Sourced by scripts/image and scripts/test (not executable on its own).
#
# The container engine that builds and runs the image, and the base it builds on.
#
# engine_detect: sets ENGINE (an array: the engine's command) and ENGINE_NAME
#   (docker or podman) to the first engine that can run here:
#   $TRIGGERHOOK_CONTAINER_ENGINE (docker or podman) when set; else docker when
#   its daemon answers (`docker info`: a docker CLI without a daemon does not
#   count); else podman when installed. Returns 1 with ENGINE_WHY saying why
#   when there is none. For podman it exports CONTAINERS_CONF (unless set
#   already): a containers.conf with the settings a machine without systemd
#   and without CAP_SYS_RESOURCE needs, harmless elsewhere (see
#   _podman_settings below).
# ensure_container_engine (scripts/test): where no engine is found, installs
#   Debian's podman and what it needs (root and apt-get; elsewhere it says
#   what to install and returns 0: the container tier then skips, saying why);
#   also podman-compose and mmdebstrap (the stand-in base's maker).
# ensure_base: sets BASE to the image to build on: $PYTHON_IMAGE when set;
#   else the Dockerfile's default (the official python:3.11.7-slim-bookworm)
#   when present or pullable; else the local stand-in (standin_base).
# standin_base: makes sure of the stand-in base (kept once made, remade when
#   its recipe's revision changes): Debian 12 (mmdebstrap --variant=minbase
#   from Debian's mirror: debootstrap's result in a fifth of its time) with
#   Debian's python3 (3.11), pip in /usr/local as in the official image. A test aid for machines that reach no image
#   registry, never for production.

# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

IMAGE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What Debian's podman needs here (the sandbox's notes: runc, not crun, which
# refuses hybrid cgroups; catatonit for --init / compose's init: true).
PODMAN_PACKAGES=(podman runc catatonit fuse-overlayfs slirp4netns uidmap netavark aardvark-dns)
# The stand-in base: name, and the revision of its recipe (bump it with the recipe).
STANDIN_IMAGE="localhost/triggerhook-python-standin:bookworm-py3.11-r5"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PULL_TIMEOUT_S="${PULL_TIMEOUT_S:-60}"

_image_log() { printf '%s\n' "image: $*" >&2; }

# The settings podman needs on a machine like the project's (no systemd as
# PID 1, cgroups in hybrid mode, no CAP_SYS_RESOURCE): the runc runtime where
# it is installed, cgroupfs, no default ulimits. Written once per content.
_podman_settings() {
    [[ -n "${CONTAINERS_CONF:-}" ]] && return 0
    local dir="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/triggerhook"
    local conf="$dir/containers.conf" text
    text="# Written by scripts/_image.sh (podman's settings for this machine).
[containers]
# podman's default ulimits need CAP_SYS_RESOURCE (setrlimit RLIMIT_NPROC).
default_ulimits = []
[engine]"
    if [[ ! -d /run/systemd/system ]]; then
        text+=$'\n'"# No systemd here: cgroups through the file system."
        text+=$'\n'"cgroup_manager = \"cgroupfs\""
        text+=$'\n'"events_logger = \"file\""
    fi
    if command -v runc >/dev/null 2>&1; then
        text+=$'\n'"# crun refuses cgroups in hybrid mode; runc does not."
        text+=$'\n'"runtime = \"runc\""
    fi
    if [[ -x /usr/lib/podman/netavark || -x /usr/libexec/podman/netavark ]]; then
        # Not CNI: Debian's podman leaves a CNI config whose plugins are not installed.
        text+=$'\n'"[network]"$'\n'"network_backend = \"netavark\""
    fi
    mkdir -p "$dir"
    if [[ ! -f "$conf" || "$(cat "$conf")" != "$text" ]]; then
        printf '%s\n' "$text" >"$conf.tmp.$$" && mv "$conf.tmp.$$" "$conf"
    fi
    export CONTAINERS_CONF="$conf"
}

engine_detect() {
    ENGINE=()
    ENGINE_NAME=""
    ENGINE_WHY=""
    local wanted="${TRIGGERHOOK_CONTAINER_ENGINE:-}"
    case "$wanted" in
        "" | docker | podman) ;;
        *)
            ENGINE_WHY="TRIGGERHOOK_CONTAINER_ENGINE=$wanted: not docker or podman"
            return 1
            ;;
    esac
    if [[ "$wanted" != podman ]] && command -v docker >/dev/null 2>&1 \
        && timeout 20 docker info >/dev/null 2>&1; then
        ENGINE=(docker)
        ENGINE_NAME=docker
        return 0
    fi
    if [[ "$wanted" != docker ]] && command -v podman >/dev/null 2>&1; then
        _podman_settings
        ENGINE=(podman)
        ENGINE_NAME=podman
        return 0
    fi
    if [[ "$wanted" == docker ]] && ! command -v docker >/dev/null 2>&1; then
        ENGINE_WHY="TRIGGERHOOK_CONTAINER_ENGINE=docker, and docker is not installed"
    elif [[ "$wanted" == docker ]]; then
        ENGINE_WHY="docker's daemon does not answer (docker info)"
    elif command -v docker >/dev/null 2>&1; then
        ENGINE_WHY="no podman, and docker's daemon does not answer (docker info)"
    else
        ENGINE_WHY="neither podman nor docker is installed"
    fi
    return 1
}

ensure_container_engine() {
    if engine_detect; then
        if [[ "$ENGINE_NAME" == podman ]]; then
            _podman_extras || return 1
        fi
        return 0
    fi
    if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        _image_log "no container engine ($ENGINE_WHY), and none can be installed here" \
            "(needs root and apt-get): the container tier skips. Install podman" \
            "(Debian: ${PODMAN_PACKAGES[*]} podman-compose mmdebstrap) or docker"
        return 0
    fi
    _image_log "no container engine ($ENGINE_WHY): installing Debian's podman"
    apt_install "${PODMAN_PACKAGES[@]}" || return 1
    _podman_extras || return 1
    engine_detect || {
        _image_log "error: podman is installed but not found: $ENGINE_WHY"
        return 1
    }
}

# podman-compose (compose.yaml's check) and mmdebstrap (the stand-in base),
# where they can be installed; runc and catatonit for podman's settings above.
_podman_extras() {
    local missing=() tool
    for tool in runc catatonit podman-compose mmdebstrap; do
        case "$tool" in
            catatonit) [[ -x /usr/bin/catatonit || -x /usr/libexec/podman/catatonit ]] ;;
            *) command -v "$tool" >/dev/null 2>&1 ;;
        esac || missing+=("$tool")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        _image_log "note: ${missing[*]} missing (Debian's packages of those names)"
        return 0
    fi
    apt_install "${missing[@]}"
}

# 0 when the image $1 is in the engine's store.
image_present() {
    if [[ "$ENGINE_NAME" == podman ]]; then
        "${ENGINE[@]}" image exists "$1"
    else
        "${ENGINE[@]}" image inspect "$1" >/dev/null 2>&1
    fi
}

# The base the Dockerfile names (its global ARG PYTHON_IMAGE's default).
dockerfile_base() {
    sed -n 's/^ARG PYTHON_IMAGE=//p' "$IMAGE_REPO/Dockerfile" | head -n 1
}

ensure_base() {
    if [[ -n "${PYTHON_IMAGE:-}" ]]; then
        BASE="$PYTHON_IMAGE"
        BASE_KIND="given (PYTHON_IMAGE)"
        return 0
    fi
    local official qualified
    official="$(dockerfile_base)"
    qualified="$official"
    # podman resolves a short name through its aliases; say it in full.
    [[ "$official" == */* ]] || qualified="docker.io/library/$official"
    if image_present "$qualified"; then
        BASE="$qualified"
        BASE_KIND="official"
        return 0
    fi
    _image_log "pulling $qualified (up to ${PULL_TIMEOUT_S}s)"
    if timeout "$PULL_TIMEOUT_S" "${ENGINE[@]}" pull -q "$qualified" >/dev/null 2>&1; then
        BASE="$qualified"
        BASE_KIND="official"
        return 0
    fi
    _image_log "cannot pull $qualified (no registry reachable?): building on the local" \
        "stand-in base $STANDIN_IMAGE (a test aid, not for production)"
    standin_base || return 1
    BASE="$STANDIN_IMAGE"
    BASE_KIND="stand-in (a test aid, not for production)"
}

standin_base() {
    if image_present "$STANDIN_IMAGE"; then
        _image_log "stand-in base $STANDIN_IMAGE: present, reused"
        return 0
    fi
    if [[ $EUID -ne 0 ]] || ! command -v mmdebstrap >/dev/null 2>&1; then
        _image_log "error: the stand-in base needs root and mmdebstrap (Debian's package);" \
            "or pass an image with Python 3.11 as PYTHON_IMAGE"
        return 1
    fi
    local log tar started=$SECONDS
    log="$(mktemp "${TMPDIR:-/tmp}/triggerhook-standin.XXXXXX")"
    tar="$log.tar"
    _image_log "making the stand-in base $STANDIN_IMAGE: mmdebstrap --variant=minbase" \
        "bookworm from $DEBIAN_MIRROR with Debian's python3 (a minute or so; log: $log)"
    # What the official slim image has beside Python: its headers (python3-dev:
    # mysqlclient compiles against them), CA certificates, netbase, tzdata;
    # Debian's sources with updates and security; Debian's images' apt
    # settings (docker-clean: no 80 MB of /var/cache/apt/*.bin left in the
    # layer of an apt-get install). As in the official image, pip and
    # setuptools installed by pip into /usr/local (from the wheels Debian
    # ships for venvs, pip run from its own wheel), and no EXTERNALLY-MANAGED
    # marker.
    # shellcheck disable=SC2016 # expanded in the chroot
    local pip='cd /usr/share/python-wheels && w=$(ls pip-*.whl) && python3 "$w/pip" install
        --no-index --no-cache-dir --disable-pip-version-check -q "$w" setuptools-*.whl
        && python3 -m pip --version'
    local clean='DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";'
    if ! mmdebstrap --variant=minbase \
        --include=python3,python3-dev,python3-venv,python-is-python3,ca-certificates,netbase,tzdata \
        --aptopt='Dir::Cache::pkgcache ""' --aptopt='Dir::Cache::srcpkgcache ""' \
        --customize-hook="printf '%s\\n' '$clean' >\"\$1/etc/apt/apt.conf.d/docker-clean\"" \
        --customize-hook='rm -f "$1"/usr/lib/python3.*/EXTERNALLY-MANAGED' \
        --customize-hook="chroot \"\$1\" sh -ec '${pip//$'\n'/ }'" \
        bookworm "$tar" "deb $DEBIAN_MIRROR bookworm main" \
        "deb $DEBIAN_MIRROR bookworm-updates main" \
        "deb ${DEBIAN_MIRROR%/debian}/debian-security bookworm-security main" >"$log" 2>&1 \
        || ! "${ENGINE[@]}" import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change 'CMD ["python3"]' \
            --change 'LABEL org.opencontainers.image.description="triggerhook test aid: Debian 12 with its python3, standing in for python:3.11-slim-bookworm; not for production"' \
            "$tar" "$STANDIN_IMAGE" >>"$log" 2>&1; then
        _image_log "error: making the stand-in base failed; the end of its log ($log):"
        tail -n 20 "$log" >&2
        rm -f "$tar"
        return 1
    fi
    rm -f "$tar" "$log"
    _image_log "stand-in base $STANDIN_IMAGE made in $((SECONDS - started))s"
    # Earlier revisions of the recipe are of no more use.
    local old
    while read -r old; do
        [[ "$old" == "$STANDIN_IMAGE" ]] || "${ENGINE[@]}" rmi "$old" >/dev/null 2>&1 || true
    done < <("${ENGINE[@]}" images --format '{{.Repository}}:{{.Tag}}' "${STANDIN_IMAGE%:*}")
}
