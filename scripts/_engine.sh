# The container engine and the base image, for scripts/container_check and
# scripts/compose_check (sourced; each defines say and fail first, and sets PYTHON and WORK).
#
# choose_engine: docker when its engine answers (`docker info`), else podman. Run as root with
# apt-get and neither present, podman is installed from the distribution's packages; with no
# engine to be had, fail says what to install. Sets ENGINE, ENGINE_OPTS (before a subcommand)
# and LIMITS (on build and run); `engine ...` runs the engine with its options.
#
# choose_base: the Dockerfile's FROM image. docker and podman pull it as usual. Where podman
# can pull nothing (a machine without a reachable registry), the base is made here, once: a
# Debian root filesystem built by debootstrap from the apt mirror this machine is set up
# with, holding python3 and this machine's own extra CA certificates (a TLS-inspecting proxy
# re-signs the package indexes; pip in the build must trust it). Sets BUILD_OPTS (for every
# `engine build`) and BASE_IMAGE, the image every build here starts from.
#
# build_image TAG DIRECTORY: one image built with them, its log in $WORK, fail on error;
# the image TAG named before is removed once another replaces it.

# `docker info` answers at once or not at all; a wedged daemon must not hang the suite.
ENGINE_PROBE_S=20
# Pulling an image over a slow link; where no registry resolves it, it fails at once.
PULL_TIMEOUT_S=300
# Python of the local base image's Debian release (bookworm ships 3.11).
LOCAL_BASE_SUITE=bookworm
LOCAL_BASE_PYTHON=3.11
LOCAL_BASE="localhost/a2a-acp-bridge-base:$LOCAL_BASE_SUITE"

# apt_install PACKAGE...: only as root, only from the distribution's own packages.
apt_install() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
    say "installing $* with apt-get"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends)
    "${apt[@]}" "$@" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && "${apt[@]}" "$@" >/dev/null; }
}

# The "+" forms keep `set -u` quiet about empty arrays in bash older than 4.4.
engine() { "$ENGINE" ${ENGINE_OPTS[@]+"${ENGINE_OPTS[@]}"} "$@"; }

choose_engine() {
    ENGINE=""
    if command -v docker >/dev/null && timeout "$ENGINE_PROBE_S" docker info >/dev/null 2>&1; then
        # podman-docker installs a `docker` that is podman: treat it as podman.
        if docker --version 2>/dev/null | grep -qi podman; then ENGINE=podman; else ENGINE=docker; fi
    fi
    if [ -z "$ENGINE" ]; then
        if command -v podman >/dev/null || apt_install podman runc iptables; then
            ENGINE=podman
        elif command -v docker >/dev/null; then
            fail "docker is installed but its engine does not answer (docker info): start it, or install podman"
        else
            fail "no container engine: install Docker (its engine running) or Podman (Debian: apt-get install podman)"
        fi
    fi

    ENGINE_OPTS=() # before the subcommand
    LIMITS=()      # on build and run
    if [ "$ENGINE" = podman ]; then
        # crun, podman's usual runtime, refuses kernels booted with the hybrid cgroup v1/v2
        # layout ("cgroups in hybrid mode not supported"); runc runs there.
        if [ -d /sys/fs/cgroup/unified ]; then
            command -v runc >/dev/null || apt_install runc \
                || fail "this kernel's hybrid cgroup layout needs runc for podman: install runc"
            ENGINE_OPTS=(--runtime runc)
        fi
        # podman asks every container for nofile 1048576 and nproc 4194304. Above this shell's
        # hard limits the runtime fails ("error setting rlimit ... operation not permitted"), and
        # podman runs the runtime with nproc lowered to 32768 (seen in conmon's limits), so ask
        # for no more than either: plenty for the bridge and its adapters.
        nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
        if [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; then nofile=1048576; fi
        if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
        LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    fi
}

# pull IMAGE: true if the engine has it or could pull it.
pull() {
    engine image inspect "$1" >/dev/null 2>&1 \
        || timeout "$PULL_TIMEOUT_S" "$ENGINE" ${ENGINE_OPTS[@]+"${ENGINE_OPTS[@]}"} pull -q "$1" >/dev/null 2>&1
}

make_local_base() {
    [ "$(id -u)" = 0 ] \
        || fail "cannot pull $FROM_IMAGE and making a local base image needs root (debootstrap): run as root, or make the registry reachable"
    [ "$PYTHON_VERSION" = "$LOCAL_BASE_PYTHON" ] \
        || fail "cannot pull $FROM_IMAGE, and the local base (Debian $LOCAL_BASE_SUITE) has Python $LOCAL_BASE_PYTHON, not $PYTHON_VERSION"
    command -v debootstrap >/dev/null || apt_install debootstrap \
        || fail "cannot pull $FROM_IMAGE; to make a local base image instead, install debootstrap"
    local mirror root
    mirror=$(apt-get indextargets --format '$(REPO_URI)' "Release: $LOCAL_BASE_SUITE" 2>/dev/null | head -n 1)
    [ -n "$mirror" ] \
        || fail "cannot pull $FROM_IMAGE, and apt has no $LOCAL_BASE_SUITE source to make a local base from"
    say "cannot pull $FROM_IMAGE: making $LOCAL_BASE (debootstrap $LOCAL_BASE_SUITE from $mirror, once)"
    root="$WORK/rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
        "$LOCAL_BASE_SUITE" "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -n 20 "$WORK/debootstrap.log" >&2; fail "debootstrap of $LOCAL_BASE_SUITE failed (its last lines are above)"; }
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
        chroot "$root" update-ca-certificates >/dev/null 2>&1 \
            || fail "update-ca-certificates failed inside the local base"
    fi
    # pip installs into the system Python like in the official images (the Dockerfile uses
    # a venv anyway); package lists and downloads do not belong in a base image.
    rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/tmp/*
    # An imported image has no configuration at all: give it the official images' PATH,
    # which the Dockerfile extends with ENV PATH=...:$PATH.
    tar -C "$root" -c . | engine import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$LOCAL_BASE" >/dev/null \
        || fail "could not import the local base image"
    rm -rf "$root"
}

# The Dockerfile's FROM with its ARG defaults filled in, and the Python version it asks for.
dockerfile_base() {
    "$PYTHON" - <<'EOF'
import re
args = {}
def fill(text):
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], ""), text)
for line in open("Dockerfile", encoding="utf-8"):
    words = line.split()
    if len(words) >= 2 and words[0].upper() == "ARG" and "=" in words[1]:
        key, value = words[1].split("=", 1)
        args[key] = fill(value.strip("\"'"))
    elif len(words) >= 2 and words[0].upper() == "FROM":
        print(fill(words[1]), args.get("PYTHON_VERSION", "?"))
        break
EOF
}

choose_base() {
    read -r FROM_IMAGE PYTHON_VERSION < <(dockerfile_base) || true
    [ -n "${FROM_IMAGE:-}" ] || fail "the Dockerfile has no FROM line"
    BASE_IMAGE="$FROM_IMAGE"
    BUILD_OPTS=()
    if [ "$ENGINE" = podman ]; then
        # docker format: the OCI image format has no HEALTHCHECK, which the checks verify.
        BUILD_OPTS=(--format docker --pull=never)
        if ! engine image exists "$FROM_IMAGE"; then
            if engine image exists "$LOCAL_BASE"; then
                BASE_IMAGE="$LOCAL_BASE"
            elif ! pull "$FROM_IMAGE"; then
                make_local_base
                BASE_IMAGE="$LOCAL_BASE"
            fi
        fi
    fi
    BUILD_OPTS+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
}

build_image() {
    local tag=$1 directory=$2 log previous
    log="$WORK/build-${tag//[^A-Za-z0-9]/_}.log"
    previous=$(engine image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
    engine build ${BUILD_OPTS[@]+"${BUILD_OPTS[@]}"} ${LIMITS[@]+"${LIMITS[@]}"} -t "$tag" "$directory" \
        >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; fail "$tag did not build from $directory (the build's last lines are above)"; }
    # The image this tag named before, now untagged: one image per tag, not one per change
    # (only that image, by id; whatever else the engine holds is not ours).
    if [ -n "$previous" ] && [ "$previous" != "$(engine image inspect --format '{{.Id}}' "$tag")" ]; then
        engine rmi "$previous" >/dev/null 2>&1 || true
    fi
}
