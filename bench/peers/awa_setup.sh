#!/usr/bin/env bash
# Creates bench/.peers/awa-venv (git-ignored) with awa 0.6.9 from PyPI: the `awa-pg` wheel ships
# awa's Rust core (PyO3), its Python SDK and `python -m awa` (migrate, storage status). Idempotent:
# an existing venv that already imports awa 0.6.9 is left as it is. Prints the venv's python.
# Usage: bench/peers/awa_setup.sh   (python3 >= 3.10 on PATH, or PYTHON=/path/to/python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/bench/.peers/awa-venv
want=0.6.9
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('awa-pg') != '$want')" 2>/dev/null; then
    mkdir -p "$root/bench/.peers"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "awa-pg==$want"
fi
echo "$venv/bin/python"
