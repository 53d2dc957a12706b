#!/usr/bin/env bash
# Fetches pgmq's SQL-only install script into bench/.peers/pgmq/pgmq.sql (git-ignored), once:
# the PyPI wheel pgmq==1.1.4 ships it as pgmq/sql/pgmq.sql. Called by bench/run and
# bench/pressure/run.py; prints the script's path.
set -euo pipefail
dir=$(cd "$(dirname "$0")/../.." && pwd)/bench/.peers/pgmq
if [ ! -f "$dir/pgmq.sql" ]; then
    echo "fetching pgmq 1.1.4 (PyPI wheel, ships sql/pgmq.sql)" >&2
    mkdir -p "$dir"
    pip download --no-deps -q "pgmq==1.1.4" -d "$dir"
    python3 - "$dir" <<'PY'
import glob, sys, zipfile
d = sys.argv[1]
z = zipfile.ZipFile(glob.glob(d + "/pgmq-1.1.4-*.whl")[0])
open(d + "/pgmq.sql", "wb").write(z.read("pgmq/sql/pgmq.sql"))
PY
fi
echo "$dir/pgmq.sql"
