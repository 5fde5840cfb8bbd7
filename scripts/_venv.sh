# Shared by scripts/serve and scripts/test: make .venv with Python >= 3.11 and install the
# project into it (editable) when pyproject.toml changed since the last install.
VENV="${VENV:-.venv}"

find_python() {
    for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    echo "error: Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
    return 1
}

ensure_venv() {  # ensure_venv EXTRAS   (EXTRAS: "" or "[dev]")
    local extras="$1" stamp
    if [ ! -x "$VENV/bin/python" ]; then
        "$(find_python)" -m venv "$VENV"
    fi
    stamp="$VENV/.installed$(echo "$extras" | tr -d '[]')"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".$extras"
        touch "$stamp"
    fi
}
