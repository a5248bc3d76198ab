#!/usr/bin/env bash
# Prepare everything docker-compose.yml needs on a machine with no image registry:
#   1. a Docker engine (installs Debian's docker.io + docker-compose and starts dockerd if none runs),
#   2. the base image labeldp-base:bookworm (debootstrap -> docker import; rootfs tarball cached),
#   3. the wheelhouse services/wheels/ (project wheel + dependency wheels for CPython 3.11,
#      including the `postgres` extra: psycopg[binary], so the labels image can use PostgreSQL),
#   4. with --infra (or LABELDP_INFRA=1) only: the image labeldp-infra:bookworm of the compose
#      profile "replicas", Debian's postgresql and haproxy installed with apt-get FROM the base
#      image (docker build --network host on services/infra plus services/apt-install.sh; needs
#      the Debian mirror).
#   5. with --spark (or LABELDP_SPARK=1) only: the image labeldp-spark:bookworm of the compose
#      profile "spark" (master, workers, driver): Debian's openjdk-17-jre-headless FROM the base
#      image, and a venv with the project and its `spark` extra (pyspark, pyarrow, pandas) from
#      the wheelhouse plus a spark wheelhouse kept in the cache folder (docker build --network
#      host services/spark/Dockerfile, with services/apt-install.sh; needs the Debian mirror,
#      and the package index once).
# Idempotent: a second run only rebuilds the project wheel (and re-runs the cached image builds).
#
#   bash services/build_base_image.sh [--infra] [--spark]
#
# Exit codes: 0 ready; 77 Docker cannot run on this machine at all (callers skip); other = error.
#
# Environment:
#   LABELDP_BASE_IMAGE      base image to prepare (default labeldp-base:bookworm; any other name
#                           is pulled from a registry instead of built with debootstrap)
#   LABELDP_INFRA           1: build the infra image as with --infra
#   LABELDP_INFRA_IMAGE     tag of the infra image (default labeldp-infra:bookworm)
#   LABELDP_SPARK           1: build the Spark image as with --spark
#   LABELDP_SPARK_IMAGE     tag of the Spark image (default labeldp-spark:bookworm)
#   LABELDP_COMPOSE_CACHE   cache folder (default <repo>/.compose-cache, git-ignored)
#   LABELDP_DOCKERD_PIDFILE where to write the pid of a dockerd this script starts (unset: not
#                           written); the tests' session fixture stops the daemon it names
#   LABELDP_DEBIAN_MIRROR   Debian mirror for debootstrap (default: the host's apt source)
#   PYTHON                  host Python used to run pip (default python3)
set -euo pipefail

readonly EXIT_NO_DOCKER=77
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO
CACHE="${LABELDP_COMPOSE_CACHE:-$REPO/.compose-cache}"
BASE_IMAGE="${LABELDP_BASE_IMAGE:-labeldp-base:bookworm}"
PY="${PYTHON:-python3}"
WHEELS="$REPO/services/wheels"
# The image's interpreter: Debian bookworm's python3 and python:3.11-slim are both CPython 3.11,
# so dependency wheels are fetched for exactly that target whatever the host Python is.
readonly IMAGE_PY_VERSION=3.11 IMAGE_PY_ABI=cp311
ARCH="$(uname -m)"
INFRA_IMAGE="${LABELDP_INFRA_IMAGE:-labeldp-infra:bookworm}"
BUILD_INFRA="${LABELDP_INFRA:-0}"
SPARK_IMAGE="${LABELDP_SPARK_IMAGE:-labeldp-spark:bookworm}"
BUILD_SPARK="${LABELDP_SPARK:-0}"
for arg in "$@"; do
    case "$arg" in
        --infra) BUILD_INFRA=1 ;;
        --spark) BUILD_SPARK=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            printf '[build_base_image] ERROR: unknown argument %s (usage: %s [--infra] [--spark])\n' \
                "$arg" "$0" >&2
            exit 2
            ;;
    esac
done

log() { printf '[build_base_image] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
no_docker() {
    log "DOCKER UNAVAILABLE: $*"
    exit "$EXIT_NO_DOCKER"
}

mkdir -p "$CACHE"
# One build at a time per cache folder: a second caller (another test worker, another shell)
# waits for the first instead of racing it on the rootfs, the wheelhouse and the image tags.
exec 9>"$CACHE/.build.lock"
flock 9

# pip with the host's configuration, minus its warnings about configured links that do not exist.
pip_quiet() {
    "$PY" -m pip "$@" --disable-pip-version-check 2> >(grep -v 'is ignored: it is neither' >&2)
}

# ---------------------------------------------------------------- 1. Docker engine
docker_ok() { timeout 20 docker info >/dev/null 2>&1; }

compose_ok() {
    timeout 20 docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1
}

apt_install() {
    [ "$#" -gt 0 ] || return 0
    [ "$(id -u)" -eq 0 ] || die "need root to install: $*"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get to install: $*"
    local apt_log="$CACHE/apt.log"
    log "apt-get install $* (log: $apt_log)"
    {
        DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
                apt-get install -y -qq --no-install-recommends "$@"
    } >"$apt_log" 2>&1 || { tail -n 20 "$apt_log" >&2; die "apt-get install $* failed"; }
}

start_dockerd() {
    local logfile="$CACHE/dockerd.log"
    if [ -S /var/run/docker.sock ] && pgrep -x dockerd >/dev/null 2>&1; then
        log "dockerd is running but not answering yet; waiting"
    else
        log "starting dockerd (log: $logfile)"
        # Published ports default to loopback (--ip) so nothing is ever exposed beyond this host;
        # all fds are redirected so a caller capturing our output does not wait on the daemon,
        # and the build lock (fd 9) is closed so the daemon does not hold it after we exit.
        setsid nohup dockerd --data-root /var/lib/docker --ip 127.0.0.1 \
            </dev/null >"$logfile" 2>&1 9>&- &
        if [ -n "${LABELDP_DOCKERD_PIDFILE:-}" ]; then
            echo "$!" >"$LABELDP_DOCKERD_PIDFILE"
        fi
    fi
    local i
    for i in $(seq 1 60); do
        docker_ok && return 0
        if [ "$i" -gt 3 ] && ! pgrep -x dockerd >/dev/null 2>&1; then
            tail -n 20 "$logfile" >&2 || true
            no_docker "dockerd exited at start-up (see $logfile)"
        fi
        sleep 1
    done
    tail -n 20 "$logfile" >&2 || true
    no_docker "dockerd did not answer within 60 s (see $logfile)"
}

# Install everything missing in one apt-get run (debootstrap only for the default base image).
missing=()
docker_ok || command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
compose_ok || missing+=(docker-compose)
if [ "$BASE_IMAGE" = "labeldp-base:bookworm" ] && ! command -v debootstrap >/dev/null 2>&1 \
    && [ ! -s "$CACHE/rootfs-bookworm.tar" ]; then
    missing+=(debootstrap)
fi
if [ "$(id -u)" -ne 0 ]; then
    docker_ok || no_docker "no Docker engine answers to this user, who is not root and so can" \
        "neither install nor start one"
    [ "${#missing[@]}" -eq 0 ] || die "missing ${missing[*]} and not root to install them"
fi
if ! docker_ok; then
    command -v apt-get >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1 \
        || no_docker "no Docker engine, no dockerd and no apt-get to install one"
fi
apt_install "${missing[@]}"
docker_ok || start_dockerd
log "Docker engine: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"

# ---------------------------------------------------------------- 2. base image
debian_mirror() {
    if [ -n "${LABELDP_DEBIAN_MIRROR:-}" ]; then
        echo "$LABELDP_DEBIAN_MIRROR"
        return
    fi
    local uri
    # deb822 sources (bookworm default), then one-line sources; skip the security archive.
    uri="$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '{print $2}' | grep -v security | head -n 1 || true)"
    if [ -z "$uri" ]; then
        uri="$(grep -hsE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            2>/dev/null | grep -v security | grep -v '\[' | awk '{print $2}' | head -n 1 || true)"
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

build_base_image() {
    local tarball="$CACHE/rootfs-bookworm.tar"
    if [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
        local rootfs="$CACHE/rootfs.tmp" mirror
        mirror="$(debian_mirror)"
        rm -rf "$rootfs"
        log "debootstrap bookworm from $mirror (takes a minute or two)"
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
            || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed"; }
        # Trim what an image never needs; apt itself stays usable.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
            "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
        tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
        mv "$tarball.tmp" "$tarball"
        rm -rf "$rootfs"
    fi
    log "docker import $tarball -> $BASE_IMAGE"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$BASE_IMAGE" >/dev/null
}

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image $BASE_IMAGE present"
elif [ "$BASE_IMAGE" = "labeldp-base:bookworm" ]; then
    build_base_image
else
    log "docker pull $BASE_IMAGE"
    docker pull "$BASE_IMAGE" >/dev/null || die "cannot pull $BASE_IMAGE"
fi

# Can this engine start a container at all (namespaces, cgroups, overlay)? If not, skip.
if ! probe_out="$(docker run --rm --network none "$BASE_IMAGE" python3 -c 'print("ok")' 2>&1)"; then
    log "$probe_out"
    no_docker "the engine runs but cannot start a container"
fi

# Superseded service images (untagged by a newer build) only take disk space.
docker image prune -f --filter label=org.labeldp.component >/dev/null 2>&1 || true

# ---------------------------------------------------------------- 3. wheelhouse
# services/wheels/deps     dependency wheels + requirements.txt (rebuilt when the deps change)
# services/wheels/build    setuptools + wheel, to build the project wheel offline
# services/wheels/project  the project wheel (rebuilt on every run from the working tree)
deps_spec="$("$PY" - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
print("\n".join(project["project"]["dependencies"]))
print("\n".join(project["project"]["optional-dependencies"]["postgres"]))
print("\n".join(project["build-system"]["requires"]))
EOF
)" || die "cannot read dependencies from pyproject.toml with $PY (needs Python >= 3.11)"
stamp="$(printf '%s\n%s %s %s\n' "$deps_spec" "$IMAGE_PY_VERSION" "$IMAGE_PY_ABI" "$ARCH" \
    | sha256sum | cut -d' ' -f1)"

if [ "$(cat "$WHEELS/deps/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
    log "building the dependency wheelhouse for CPython $IMAGE_PY_VERSION $ARCH"
    tmp="$WHEELS/.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp/deps" "$tmp/build"
    "$PY" - "$REPO/pyproject.toml" >"$tmp/deps/requirements.txt" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
# The `postgres` extra too: the labels image talks to PostgreSQL (compose profile "replicas").
print("\n".join(project["dependencies"] + project["optional-dependencies"]["postgres"]))
EOF
    "$PY" - "$REPO/pyproject.toml" >"$tmp/build/requirements.txt" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
EOF
    # glibc 2.36 (bookworm) runs every manylinux_2_x wheel up to 2_36; older pips do not
    # expand one --platform to the older ones, so list them all.
    target=(--only-binary=:all: --python-version "$IMAGE_PY_VERSION" --implementation cp
        --abi "$IMAGE_PY_ABI")
    for v in $(seq 36 -1 5); do target+=(--platform "manylinux_2_${v}_$ARCH"); done
    target+=(--platform "manylinux2014_$ARCH" --platform "manylinux2010_$ARCH"
        --platform "manylinux1_$ARCH")
    pip_quiet download -q "${target[@]}" \
        -d "$tmp/deps" -r "$tmp/deps/requirements.txt" || die "pip download of the dependencies failed"
    pip_quiet download -q --only-binary=:all: \
        -d "$tmp/build" -r "$tmp/build/requirements.txt" || die "pip download of build tools failed"
    echo "$stamp" >"$tmp/deps/.stamp"
    rm -rf "$WHEELS/deps" "$WHEELS/build"
    mv "$tmp/deps" "$WHEELS/deps"
    mv "$tmp/build" "$WHEELS/build"
    rm -rf "$tmp"
else
    log "dependency wheelhouse up to date"
fi

# The project wheel is built from a clean copy of the working tree (tracked and untracked,
# not ignored files), so a stale build/ folder can never leak removed modules into the image.
log "building the project wheel from the working tree"
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
list_sources() {
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$REPO" ls-files -z --cached --others --exclude-standard \
            | while IFS= read -r -d '' f; do [ -e "$REPO/$f" ] && printf '%s\0' "$f"; done
    else
        (cd "$REPO" && find shared labels_party features_party demo pyproject.toml README.md \
            -name __pycache__ -prune -o -print0 2>/dev/null)
    fi
}
list_sources | tar -C "$REPO" --null --no-recursion -T - -cf - | tar -C "$src" -xf -
rm -rf "$WHEELS/project"
mkdir -p "$WHEELS/project"
pip_quiet wheel -q --no-deps --no-index \
    --find-links "$WHEELS/build" -w "$WHEELS/project" "$src" >/dev/null \
    || die "building the project wheel failed"
dep_wheels=("$WHEELS"/deps/*.whl)
log "ready: base image $BASE_IMAGE, wheelhouse $WHEELS (${#dep_wheels[@]} dependency wheels)"

# The security archive for the images that apt-get from Debian (infra, spark).
debian_security() {
    local uri
    uri="$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '{print $2}' | grep security | head -n 1 || true)"
    echo "${uri:-http://deb.debian.org/debian-security}"
}

# The build context of an image that apt-get installs from Debian (infra, spark): services/<name>/
# plus services/apt-install.sh (their one apt prelude), assembled afresh in $CACHE/<name>-build.
apt_context() {
    local context="$CACHE/$1-build"
    rm -rf "$context"
    mkdir -p "$context"
    cp -a "$REPO/services/$1/." "$context/"
    cp -a "$REPO/services/apt-install.sh" "$context/apt-install.sh"
}

# apt_build NAME TAG WHAT: docker build TAG from $CACHE/NAME-build (apt_context, plus what the
# caller adds) on the host's network, FROM the base image, with the host's security archive; the
# log in $CACHE/NAME-build.log; the context is removed afterwards.
apt_build() {
    local context="$CACHE/$1-build" build_log="$CACHE/$1-build.log"
    log "docker build $2: $3 (log: $build_log)"
    DOCKER_BUILDKIT=0 docker build --network host \
        --build-arg BASE_IMAGE="$BASE_IMAGE" \
        --build-arg DEBIAN_SECURITY="$(debian_security)" \
        -t "$2" "$context" >"$build_log" 2>&1 \
        || { tail -n 30 "$build_log" >&2; die "building $2 failed"; }
    rm -rf "$context"
}

# ---------------------------------------------------------------- 4. infra image (--infra)
# PostgreSQL and HAProxy for the compose profile "replicas", from Debian's packages: apt-get runs
# in a build container on the host's network (the engine's bridge may have no route out), FROM
# the base image, so no registry is needed. The services' own images carry neither.
if [ "$BUILD_INFRA" = 1 ]; then
    apt_context infra
    apt_build infra "$INFRA_IMAGE" "Debian's postgresql and haproxy"
    log "ready: infra image $INFRA_IMAGE ($(docker run --rm --network none "$INFRA_IMAGE" \
        sh -c 'postgres --version; haproxy -v | head -n 1' | tr '\n' ' '))"
fi

# ---------------------------------------------------------------- 5. Spark image (--spark)
# One image for the compose profile "spark": master, workers and the release's driver. Its
# wheelhouse ($CACHE/spark-wheels: the `spark` extra for CPython 3.11, rebuilt when the extra
# changes) stays out of services/, so the parties' build context never carries pyspark's wheel;
# the build context is assembled in $CACHE/spark-build (the wheelhouses from hard links).
if [ "$BUILD_SPARK" = 1 ]; then
    spark_spec="$("$PY" - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["spark"]))
EOF
)" || die "cannot read the spark extra from pyproject.toml"
    spark_wheels="$CACHE/spark-wheels"
    spark_stamp="$(printf '%s\n%s %s %s\n' "$spark_spec" "$IMAGE_PY_VERSION" "$IMAGE_PY_ABI" \
        "$ARCH" | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$spark_wheels/.stamp" 2>/dev/null || true)" != "$spark_stamp" ]; then
        log "building the spark wheelhouse for CPython $IMAGE_PY_VERSION $ARCH"
        tmp="$CACHE/spark-wheels.tmp"
        rm -rf "$tmp"
        mkdir -p "$tmp"
        printf '%s\n' "$spark_spec" >"$tmp/requirements.txt"
        # pyspark is published as a source distribution only: build its (pure Python) wheel
        # here, then fetch every other wheel for the image's interpreter next to it.
        pyspark_req="$(grep -iE '^pyspark([^a-z0-9_.-]|$)' "$tmp/requirements.txt" || true)"
        if [ -n "$pyspark_req" ]; then
            pip_quiet wheel -q --no-deps -w "$tmp" "$pyspark_req" >/dev/null \
                || die "building the pyspark wheel failed"
        fi
        target=(--only-binary=:all: --python-version "$IMAGE_PY_VERSION" --implementation cp
            --abi "$IMAGE_PY_ABI")
        for v in $(seq 36 -1 5); do target+=(--platform "manylinux_2_${v}_$ARCH"); done
        target+=(--platform "manylinux2014_$ARCH" --platform "manylinux2010_$ARCH"
            --platform "manylinux1_$ARCH")
        pip_quiet download -q "${target[@]}" --find-links "$tmp" -d "$tmp" \
            -r "$tmp/requirements.txt" || die "pip download of the spark extra failed"
        echo "$spark_stamp" >"$tmp/.stamp"
        rm -rf "$spark_wheels"
        mv "$tmp" "$spark_wheels"
    else
        log "spark wheelhouse up to date"
    fi
    apt_context spark
    context="$CACHE/spark-build"
    mkdir -p "$context/wheels"
    for part in deps project; do
        cp -al "$WHEELS/$part" "$context/wheels/$part" 2>/dev/null \
            || cp -a "$WHEELS/$part" "$context/wheels/$part"
    done
    cp -al "$spark_wheels" "$context/wheels/spark" 2>/dev/null \
        || cp -a "$spark_wheels" "$context/wheels/spark"
    apt_build spark "$SPARK_IMAGE" "Java 17, pyspark and the project"
    docker image prune -f --filter label=org.labeldp.component=spark >/dev/null 2>&1 || true
    log "ready: Spark image $SPARK_IMAGE ($(docker run --rm --network none "$SPARK_IMAGE" \
        sh -c 'java -version 2>&1 | head -n 1; python -c "import pyspark; print(pyspark.__version__)"' \
        | tr '\n' ' '))"
fi
