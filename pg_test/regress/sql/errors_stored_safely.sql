-- The error text given to jq.fail is stored as text, never spliced into JSON,
-- so a "\u0000" escape, quotes, backslashes, control characters, emoji and a 10 MB message all
-- record the failure: the job moves on (scheduled for a retry, or dead), the error is kept
-- verbatim, or cut to jq.max_error_length() characters followed by a marker.
--
-- Negative control (run by hand): with jq._clip_error replaced by a version that builds the
-- text through JSON, ('{"e": "' || error || '"}')::jsonb ->> 'e', the first jq.fail raises
-- 22P05 ("\u0000 cannot be converted to text") and the quote/backslash one 22P02, both jobs
-- stay running (the failure seen in pg-boss and hatchet).
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate
-- Fixed 1 minute backoff without jitter, so a retry is deterministically 'scheduled'.
SELECT name FROM jq.create_queue('errors_safe', max_attempts => 3, backoff => 'fixed',
                                 backoff_base => interval '1 minute', jitter => 'none');
SELECT jq.max_error_length();
SHOW standard_conforming_strings;

-- One job per case, claimed at once; the tokens are kept in a temp table.
CREATE TEMP TABLE claimed (name text PRIMARY KEY, id bigint, lease_token uuid);
SELECT count(*) AS enqueued FROM (
    SELECT jq.enqueue('errors_safe', jsonb_build_object('case', c),
                      max_attempts => CASE WHEN c LIKE 'huge%' THEN 1 END)
    FROM unnest(ARRAY['nul_escape', 'quotes', 'huge', 'at_limit', 'over_limit', 'null_error']) c) e;
INSERT INTO claimed
SELECT c.payload ->> 'case', c.id, c.lease_token FROM jq.claim('errors_safe', 'w', 10) c;
SELECT name FROM claimed ORDER BY name;

-- The six characters \u0000 in a standard string (not a NUL byte, which text cannot hold).
SELECT jq.fail(id, lease_token, 'boom \u0000 tail') AS state FROM claimed WHERE name = 'nul_escape';
SELECT j.state, j.last_error, length(j.last_error) AS len,
       j.last_error = 'boom ' || chr(92) || 'u0000 tail' AS verbatim
FROM jq.jobs j JOIN claimed c USING (id) WHERE c.name = 'nul_escape';

SELECT jq.fail(id, lease_token, E'quote " backslash \\ newline \n tab \t emoji 🎉') AS state
FROM claimed WHERE name = 'quotes';
SELECT j.state,
       j.last_error = E'quote " backslash \\ newline \n tab \t emoji 🎉' AS verbatim,
       length(j.last_error) AS chars, octet_length(j.last_error) AS bytes
FROM jq.jobs j JOIN claimed c USING (id) WHERE c.name = 'quotes';

-- A 10,000,000 character error on the job's last attempt: the job goes dead, the error is
-- cut to 16,384 characters plus the marker (checked by length and suffix, not printed).
SELECT jq.fail(id, lease_token, repeat('x', 10000000)) AS state FROM claimed WHERE name = 'huge';
SELECT j.state, length(j.last_error) AS len,
       length(j.last_error) = jq.max_error_length()
           + length(' ...[truncated, 10000000 characters in all]') AS len_is_limit_plus_marker,
       left(j.last_error, jq.max_error_length()) = repeat('x', jq.max_error_length()) AS kept_prefix,
       right(j.last_error, 44) AS suffix
FROM jq.jobs j JOIN claimed c USING (id) WHERE c.name = 'huge';

-- Exactly the limit is kept whole; one character more is cut.
SELECT jq.fail(id, lease_token, repeat('y', jq.max_error_length())) AS state
FROM claimed WHERE name = 'at_limit';
SELECT jq.fail(id, lease_token, repeat('z', jq.max_error_length() + 1)) AS state
FROM claimed WHERE name = 'over_limit';
SELECT c.name, length(j.last_error) AS len, j.last_error LIKE '%...[truncated,%' AS marked,
       right(j.last_error, 41) AS suffix
FROM jq.jobs j JOIN claimed c USING (id) WHERE c.name IN ('at_limit', 'over_limit') ORDER BY c.name;

-- No error text at all is accepted too.
SELECT jq.fail(id, lease_token, NULL) AS state FROM claimed WHERE name = 'null_error';
SELECT j.state, j.last_error IS NULL AS no_error
FROM jq.jobs j JOIN claimed c USING (id) WHERE c.name = 'null_error';

-- The execution history holds the same text as the job row, one failed execution per job.
SELECT c.name, e.outcome, e.attempt, e.error IS NOT DISTINCT FROM j.last_error AS same_as_job
FROM claimed c JOIN jq.jobs j USING (id) JOIN jq.executions e ON e.job_id = c.id
ORDER BY c.name, e.seq;

-- The retries are claimable again once due, and a second failure stores the new text.
SELECT jq._promote(now() + interval '2 minutes') AS promoted;
SELECT count(*) AS reclaimed FROM (
    SELECT jq.fail(c.id, c.lease_token, 'second: ' || chr(92) || 'u0000')
    FROM jq.claim('errors_safe', 'w2', 10) c WHERE c.payload ->> 'case' = 'nul_escape') f;
SELECT j.state, j.attempt, j.last_error
FROM jq.jobs j JOIN claimed c USING (id) WHERE c.name = 'nul_escape';

SELECT jq.drop_queue('errors_safe', force => true);
