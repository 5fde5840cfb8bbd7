# Sourced by scripts/test: install the A2A clients the interop tests drive, each in an
# environment of its own so their a2a-sdk pins never meet (tests/interop/*/):
#   .interop/adk, .interop/sdk03, .interop/strands   virtual environments, from the frozen
#                                                     requirements.txt beside each driver
#   tests/interop/js13, tests/interop/js03           npm ci from their package-lock.json
# Each is installed again only when its lock file changed (a stamp holds the copy it was
# installed from), so a second run costs nothing. Fails, never skips, when one cannot be.
INTEROP_DIR="${INTEROP_DIR:-.interop}"
INTEROP_PYTHON_CLIENTS=(adk sdk03 strands)
INTEROP_NODE_CLIENTS=(js13 js03)

_interop_python() {  # _interop_python NAME
    local name="$1" lock="tests/interop/$1/requirements.txt" env="$INTEROP_DIR/$1"
    local stamp="$env/.installed-requirements.txt"
    if [ -f "$stamp" ] && cmp -s "$lock" "$stamp"; then
        return 0
    fi
    echo "== interop client $name: a virtual environment from $lock"
    rm -rf "$env"
    "$(find_python)" -m venv "$env" &&
        "$env/bin/python" -m pip install --quiet --disable-pip-version-check -r "$lock" || {
        echo "error: the interop client $name could not be installed into $env" >&2
        return 1
    }
    cp "$lock" "$stamp"
}

_interop_node() {  # _interop_node NAME
    local dir="tests/interop/$1" stamp="tests/interop/$1/node_modules/.installed-package-lock.json"
    if [ -f "$stamp" ] && cmp -s "$dir/package-lock.json" "$stamp"; then
        return 0
    fi
    echo "== interop client $1: npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || {
        echo "error: npm ci failed in $dir: the interop client $1 could not be installed." >&2
        return 1
    }
    cp "$dir/package-lock.json" "$stamp"
}

ensure_interop_clients() {
    local name pids=() failed=0
    mkdir -p "$INTEROP_DIR"
    # In parallel: most of a cold install is waiting on downloads.
    for name in "${INTEROP_PYTHON_CLIENTS[@]}"; do _interop_python "$name" & pids+=($!); done
    for name in "${INTEROP_NODE_CLIENTS[@]}"; do _interop_node "$name" & pids+=($!); done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    return "$failed"
}
