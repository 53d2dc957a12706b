# Sourced by bench/run (with SKIP_INSTALL=1), bench/experiments/ab_variant.sh and bench/experiments/decompose/run, which
# measure the jq.so already installed: refuse a debug build. pg_test/run, the main job and CI
# install one (tools/install without --release) into the same PostgreSQL, and a debug jq
# drains at about half its speed, while the floor and the peers do not change: every ratio to
# jq is then wrong. (Seen: an hour of measurements taken on the debug build CI had left.)
require_release_jq() {  # pg_config
    local so; so="$("$1" --pkglibdir)/jq.so"
    [ -f "$so" ] || { echo "jq is not installed in $("$1" --pkglibdir)" >&2; exit 2; }
    if readelf -S "$so" | grep -q '\.debug_info'
    then
        echo "$so is a debug build (installed by pg_test/run, the main job or CI?): its figures would be" \
             "wrong. Install a release build first: tools/install --release --pg-config $1" >&2
        exit 2
    fi
}
