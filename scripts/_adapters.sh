# Sourced by scripts/test: install the pinned ACP adapters (adapters/package-lock.json) into
# adapters/node_modules with `npm ci`, only when the lockfile changed since the last install.
# Node.js and npm are required: without them this fails, it never skips the adapter tests.
ADAPTERS_DIR="${ADAPTERS_DIR:-adapters}"
NODE_MAJOR_MIN=20

ensure_adapters() {
    local stamp="$ADAPTERS_DIR/node_modules/.installed-package-lock.json" major
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "error: Node.js $NODE_MAJOR_MIN+ and npm are needed: the test suite runs the real" \
            "claude, codex and gemini adapters pinned in $ADAPTERS_DIR/package-lock.json." \
            "Install them (Debian: apt-get install nodejs npm) and run this again." >&2
        return 1
    fi
    major="$(node -p 'process.versions.node.split(".")[0]')"
    if [ "$major" -lt "$NODE_MAJOR_MIN" ]; then
        echo "error: Node.js $NODE_MAJOR_MIN or newer is needed for the adapters" \
            "(found $(node --version))." >&2
        return 1
    fi
    if [ -f "$stamp" ] && cmp -s "$ADAPTERS_DIR/package-lock.json" "$stamp"; then
        return 0
    fi
    echo "== npm ci in $ADAPTERS_DIR (the lockfile changed since the last install)"
    (cd "$ADAPTERS_DIR" && npm ci --no-audit --no-fund --loglevel=error) || {
        echo "error: npm ci failed in $ADAPTERS_DIR: the adapters could not be installed." >&2
        return 1
    }
    cp "$ADAPTERS_DIR/package-lock.json" "$stamp"
}
