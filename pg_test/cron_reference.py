#!/usr/bin/env python3
"""Reference fire times for pg_test/tests/cron/calendar.rs (cron_next_agrees_with_croniter).

Reads one JSON object per line, {"cron": "...", "tz": "Area/City", "after": <epoch seconds>},
and prints per line the first fire time strictly after `after` according to croniter (pinned in
.ci/setup), in epoch seconds, or "skip" when the case lies near a UTC-offset change of the zone:
there croniter's DST policy and jq's differ by design (docs/cron.md), so nothing is compared.
"""
import json
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter

DAY = timedelta(hours=26)


def offsets_stable(tz, instant):
    """True when the zone's UTC offset is the same 26 hours either side of the instant."""
    offs = {(instant + d).astimezone(tz).utcoffset() for d in (-DAY, timedelta(0), DAY)}
    return len(offs) == 1


def main():
    for line in sys.stdin:
        case = json.loads(line)
        tz = ZoneInfo(case["tz"])
        after = datetime.fromtimestamp(case["after"], tz=timezone.utc)
        nxt = croniter(case["cron"], after.astimezone(tz)).get_next(datetime)
        nxt_utc = nxt.astimezone(timezone.utc)
        # Also left out: an offset change between `after` and the answer. croniter 6.0.0
        # keeps the offset of `after` there (`* * * 10 *` in America/New_York from 2023-01-06
        # answers 2023-09-30 23:00 EDT instead of 2023-10-01 00:00 EDT).
        if not (offsets_stable(tz, after) and offsets_stable(tz, nxt_utc)) \
                or after.astimezone(tz).utcoffset() != nxt.utcoffset():
            print("skip")
        else:
            print(int(nxt_utc.timestamp()))


if __name__ == "__main__":
    main()
