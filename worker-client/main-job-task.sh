#!/bin/sh
# The handler of the main job, run by `jqctl work` once per job: the payload JSON arrives on
# stdin, the job's queue in JQ_QUEUE. It prints a JSON result on stdout (stored with the job)
# or fails with a message on stderr and a non-zero exit (the job is retried, then dead).
#
#   checksum  {"path": F}  SHA-256 of F, then enqueue a compress job for F (idempotency key
#                          compress:F, so a rerun of this job does not compress twice)
#   compress  {"path": F}  gzip F (kept), result: compressed size
#   reports   {"dir": D}   fired by the cron schedule: counts and sizes of D's files
set -eu
payload=$(cat)
field() { printf '%s' "$payload" | sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p"; }
case "$JQ_QUEUE" in
checksum)
    path=$(field path)
    [ -r "$path" ] || { echo "cannot read $path" >&2; exit 1; }
    sum=$(sha256sum "$path" | cut -d' ' -f1)
    "$JQCTL" -q enqueue compress "{\"path\":\"$path\"}" --key "compress:$path" >/dev/null
    printf '{"sha256":"%s"}\n' "$sum"
    ;;
compress)
    path=$(field path)
    gzip -kf "$path"
    printf '{"bytes":%s}\n' "$(stat -c %s "$path.gz")"
    ;;
reports)
    dir=$(field dir)
    files=$(find "$dir" -name '*.bin' | wc -l)
    gz=$(find "$dir" -name '*.gz' | wc -l)
    bytes=$(du -sb "$dir" | cut -f1)
    printf '{"files":%s,"compressed":%s,"bytes":%s}\n' "$files" "$gz" "$bytes"
    ;;
*)
    echo "no task for queue $JQ_QUEUE" >&2
    exit 2
    ;;
esac
