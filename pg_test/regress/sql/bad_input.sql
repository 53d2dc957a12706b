-- Bad input: every function rejects it with the documented SQLSTATE and writes nothing.
-- Also probes of timestamp limits, negative or zero delays, NaN and invalid JSON, and the
-- queue-name cases (the names end to end are in
-- queue_names). Errors print as their SQLSTATE only; where the message matters (the position
-- of a bad element) it is echoed from LAST_ERROR_MESSAGE.
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate
SELECT name FROM jq.create_queue('bad_input');
-- What this file has written so far, relative to the start: every failing call must leave
-- both at their values from before it (checked after each group).
SELECT count(*) AS queues0 FROM jq.queues \gset
SELECT count(*) AS jobs0 FROM jq.jobs \gset
CREATE TEMP VIEW written AS
SELECT (SELECT count(*) FROM jq.queues) - :queues0 AS new_queues,
       (SELECT count(*) FROM jq.jobs) - :jobs0 AS new_jobs;

-- Queue names: NULL is 22004; empty, 129 characters, a space, SQL punctuation and non-ASCII
-- letters are 22023, for create_queue and for enqueue alike.
SELECT jq.create_queue(NULL);
SELECT jq.create_queue('');
SELECT jq.create_queue(repeat('a', 129));
SELECT jq.create_queue('my queue');
SELECT jq.create_queue('q;drop table x');
SELECT jq.create_queue('ünïcödé');
SELECT jq.enqueue(NULL);
SELECT jq.enqueue('');
SELECT jq.enqueue(repeat('a', 129));
SELECT jq.enqueue('my queue');
SELECT jq.enqueue('q;drop table x');
SELECT jq.enqueue('ünïcödé');
SELECT jq.enqueue_many('q;drop table x', '[1]');
SELECT * FROM jq.claim('my queue', 'w');
SELECT * FROM written;
-- The message quotes the name as a literal, so the name cannot break out of it.
SELECT jq.create_queue('q'';drop table x');
\echo :LAST_ERROR_MESSAGE
SELECT * FROM written;

-- Valid edge names: 128 characters, a hyphen, every allowed punctuation mark; end to end.
SELECT length(name) FROM jq.create_queue(repeat('a', 128));
SELECT name FROM jq.create_queue('my-queue');
SELECT name FROM jq.create_queue('a.b:c_d-1');
SELECT count(*) AS enqueued FROM (
    SELECT jq.enqueue(n, jsonb_build_object('q', n))
    FROM (VALUES (repeat('a', 128)), ('my-queue'), ('a.b:c_d-1')) v(n)) e;
SELECT c.queue = 'my-queue' AS right_queue, c.payload ->> 'q' = 'my-queue' AS right_job
FROM jq.claim('my-queue', 'w') c;
SELECT c.payload ->> 'q' AS payload FROM jq.claim('a.b:c_d-1', 'w') c;
SELECT length(c.payload ->> 'q') AS payload_len FROM jq.claim(repeat('a', 128), 'w') c;
SELECT jq.drop_queue(n, force => true) FROM (VALUES (repeat('a', 128)), ('my-queue'), ('a.b:c_d-1')) v(n);
SELECT * FROM written;

-- Well-formed names of queues that do not exist: 42704 from every function.
SELECT jq.enqueue('no_such_queue');
SELECT jq.enqueue_many('no_such_queue', '[1]');
SELECT * FROM jq.claim('no_such_queue', 'w');
SELECT * FROM jq.claim(ARRAY['bad_input', 'no_such_queue'], 'w');
SELECT jq.alter_queue('no_such_queue', max_attempts => 3);
SELECT jq.drop_queue('no_such_queue');
SELECT jq.pause('no_such_queue');
SELECT jq.resume('no_such_queue');
-- A malformed name is reported as malformed, not as unknown.
SELECT jq.pause('');
SELECT jq.alter_queue(NULL);
SELECT jq.drop_queue(NULL);
SELECT * FROM written;

-- claim: n outside 1..1000, a zero or negative lease, a missing or overlong worker: 22023.
SELECT * FROM jq.claim('bad_input', 'w', 0);
SELECT * FROM jq.claim('bad_input', 'w', -1);
SELECT * FROM jq.claim('bad_input', 'w', 1001);
SELECT * FROM jq.claim('bad_input', 'w', NULL);
SELECT * FROM jq.claim(ARRAY['bad_input'], 'w', 1001);
SELECT * FROM jq.claim(ARRAY[]::text[], 'w');
SELECT * FROM jq.claim('bad_input', 'w', lease => interval '0');
SELECT * FROM jq.claim('bad_input', 'w', lease => interval '-1 second');
SELECT * FROM jq.claim('bad_input', NULL);
SELECT * FROM jq.claim('bad_input', repeat('w', 201));
-- The bounds themselves are accepted (nothing to claim yet).
SELECT count(*) FROM jq.claim('bad_input', 'w', 1000);
SELECT count(*) FROM jq.claim('bad_input', 'w', 1, interval '1 microsecond');
-- heartbeat: a zero or negative extension; complete_many: arrays of different lengths.
SELECT jq.heartbeat(1, gen_random_uuid(), interval '0');
SELECT jq.heartbeat(1, gen_random_uuid(), interval '-1 minute');
SELECT jq.complete_many(ARRAY[1, 2]::bigint[], ARRAY[gen_random_uuid()]);
SELECT jq.complete_many(ARRAY[1]::bigint[], ARRAY[gen_random_uuid()], ARRAY['{}', '{}']::jsonb[]);
SELECT * FROM written;

-- max_attempts <= 0 and other invalid job fields, for enqueue and create_queue.
SELECT jq.enqueue('bad_input', max_attempts => 0);
SELECT jq.enqueue('bad_input', max_attempts => -1);
SELECT jq.enqueue('bad_input', kind => '');
SELECT jq.enqueue('bad_input', kind => repeat('k', 201));
SELECT jq.enqueue('bad_input', idempotency_key => '');
SELECT jq.enqueue('bad_input', idempotency_key => repeat('k', 513));
SELECT jq.create_queue('bad_input_2', max_attempts => 0);
SELECT jq.create_queue('bad_input_2', max_attempts => -5);
SELECT jq.create_queue('bad_input_2', lease => interval '0');
SELECT jq.create_queue('bad_input_2', lease => interval '-5 minutes');
SELECT jq.create_queue('bad_input_2', max_concurrency => 0);
SELECT jq.create_queue('bad_input_2', max_lease_expiries => -1);
SELECT jq.create_queue('bad_input_2', backoff_base => interval '-1 second');
SELECT jq.create_queue('bad_input_2', retention => interval '-1 day');
-- NULL for an option other than max_concurrency is 22004, not "use the default".
SELECT jq.create_queue('bad_input_2', lease => NULL);
SELECT jq.create_queue('bad_input_2', max_attempts => NULL);
-- A typo in an enum option fails in the cast (22P02) before the call.
SELECT jq.create_queue('bad_input_2', backoff => 'exponentail');
SELECT jq.create_queue('bad_input_2', jitter => 'ful');
SELECT jq.alter_queue('bad_input', backoff => 'expo');
SELECT * FROM written;

-- run_at and delay: infinite run_at is 22023; a delay that overflows the timestamp range is
-- 22008; giving both is 22023.
SELECT jq.enqueue('bad_input', run_at => 'infinity');
SELECT jq.enqueue('bad_input', run_at => '-infinity');
SELECT jq.enqueue('bad_input', delay => interval '300000 years');
SELECT jq.enqueue('bad_input', run_at => now(), delay => interval '1 minute');
SELECT jq.enqueue('bad_input', run_at => now() + interval '1 day', delay => interval '-1 minute');
SELECT * FROM written;
-- A negative or zero delay means now: ready, due at the enqueue instant.
SELECT jq.enqueue('bad_input', jsonb_build_object('d', '-5 minutes'), delay => interval '-5 minutes') AS neg_id \gset
SELECT jq.enqueue('bad_input', jsonb_build_object('d', '0'), delay => interval '0') AS zero_id \gset
SELECT payload ->> 'd' AS delay, state, run_at = created_at AS due_at_enqueue
FROM jq.jobs WHERE id IN (:neg_id, :zero_id) ORDER BY id;
SELECT * FROM written;

-- Payloads. SQL NULL is 22004 (JSON null is a valid payload).
SELECT jq.enqueue('bad_input', NULL);
SELECT jq.enqueue('bad_input', payload => NULL);
-- The limit is 1 MiB by default (jq.max_payload_bytes()), measured before compression: a JSON string of
-- 1,048,564 characters is exactly 1,048,576 bytes of jsonb and is accepted; one more character
-- is 54000, even though the highly compressible value would be stored in a few kilobytes.
SELECT jq.max_payload_bytes(), pg_column_size(to_jsonb(repeat('x', 1048564))) AS at_limit;
SELECT jq.enqueue('bad_input', to_jsonb(repeat('x', 1048564))) AS big_id \gset
SELECT length(payload #>> '{}') AS stored_len FROM jq.jobs WHERE id = :big_id;
SELECT jq.enqueue('bad_input', to_jsonb(repeat('x', 1048565)));
SELECT :'LAST_ERROR_MESSAGE' LIKE '%exceeds the maximum of 1048576 bytes (setting jq.max_payload_bytes)' AS says_limit;
SELECT jq.enqueue('bad_input', (SELECT jsonb_agg(g) FROM generate_series(1, 200000) g));
-- The same 2 MB string read back from a table, where it is stored compressed: still refused.
CREATE TEMP TABLE compressible AS SELECT to_jsonb(repeat('x', 2000000)) AS p;
SELECT pg_column_size(p) < 100000 AS stored_compressed FROM compressible;
SELECT jq.enqueue('bad_input', p) FROM compressible;
SELECT jq.enqueue_many('bad_input', jsonb_build_array(p)) FROM compressible;
SELECT * FROM written;
-- Invalid JSON text fails in the cast; a statement that enqueued other jobs before reaching
-- the bad row is rolled back with it (22P02: JSON has no NaN; 22P05: \u0000 cannot be text).
SELECT '{"x": NaN}'::jsonb;
SELECT '{"s":"\u0000"}'::jsonb;
SELECT jq.enqueue('bad_input', t::jsonb)
FROM (VALUES (1, '{"ok": 1}'), (2, '{"x": NaN}')) v(n, t) ORDER BY n;
SELECT jq.enqueue('bad_input', t::jsonb)
FROM (VALUES (1, '{"ok": 1}'), (2, '{"s":"\u0000"}')) v(n, t) ORDER BY n;
SELECT * FROM written;
-- Probes: Postgres turns NaN and Infinity into JSON strings, so such payloads are accepted and
-- come back as strings, not numbers (documented here; jq builds no JSON from them itself).
SELECT jq.enqueue('bad_input', to_jsonb('NaN'::numeric)) AS nan_id \gset
SELECT jq.enqueue('bad_input', to_jsonb('Infinity'::float8)) AS inf_id \gset
SELECT jq.enqueue('bad_input', jsonb_build_object('x', '-Infinity'::float8, 'y', 'NaN'::float8)) AS obj_id \gset
SELECT payload, jsonb_typeof(payload) FROM jq.jobs WHERE id IN (:nan_id, :inf_id, :obj_id) ORDER BY id;
SELECT jq.enqueue('bad_input', 'null'::jsonb) AS null_id \gset
SELECT payload, jsonb_typeof(payload) FROM jq.jobs WHERE id = :null_id;

-- enqueue_many: payloads must be a JSON array.
SELECT count(*) AS jobs1 FROM jq.jobs \gset
SELECT jq.enqueue_many('bad_input', '{}');
SELECT jq.enqueue_many('bad_input', '1');
SELECT jq.enqueue_many('bad_input', NULL);
SELECT jq.enqueue_many('bad_input', '[1]', specs => NULL);
-- With specs, an unknown field and a non-object element are 22023, named by position.
SELECT jq.enqueue_many('bad_input', '[{"payload": 1}, {"payload": 2, "prio": 5}]', specs => true);
\echo :LAST_ERROR_MESSAGE
SELECT jq.enqueue_many('bad_input', '[{"payload": 1}, 2]', specs => true);
\echo :LAST_ERROR_MESSAGE
-- A bad element is reported by its 1-based position, with its own SQLSTATE, and nothing
-- before it is written.
SELECT jq.enqueue_many('bad_input', '[{"payload": 1}, {"payload": 2}, {"max_attempts": 0}]', specs => true);
\echo :LAST_ERROR_MESSAGE
SELECT jq.enqueue_many('bad_input', '[{"kind": "a"}, {"kind": ""}]', specs => true);
\echo :LAST_ERROR_MESSAGE
-- (run_at with delay, and an infinite run_at, share one catch-all message: check its position.)
SELECT jq.enqueue_many('bad_input', '[{"run_at": "2020-01-01", "delay": "1 second"}]', specs => true);
SELECT :'LAST_ERROR_MESSAGE' LIKE 'job 1 of payloads (1-based)%' AS names_job_1;
SELECT jq.enqueue_many('bad_input', '[{"payload": 1}, {"run_at": "infinity"}]', specs => true);
SELECT :'LAST_ERROR_MESSAGE' LIKE 'job 2 of payloads (1-based)%' AS names_job_2;
SELECT jq.enqueue_many('bad_input', jsonb_build_array(1, to_jsonb(repeat('x', 1048565))));
SELECT :'LAST_ERROR_MESSAGE' LIKE 'job 2 of payloads (1-based): %exceeds the maximum of 1048576 bytes (setting jq.max_payload_bytes)' AS names_job_2;
SELECT jq.enqueue_many('bad_input', jsonb_build_array(1, 2, 3), max_attempts => 0);
\echo :LAST_ERROR_MESSAGE
-- Casts of spec fields raise Postgres' own errors.
SELECT jq.enqueue_many('bad_input', '[{"delay": "soon"}]', specs => true);
SELECT jq.enqueue_many('bad_input', '[{"delay": "300000 years"}]', specs => true);
SELECT jq.enqueue_many('bad_input', '[{"priority": "high"}]', specs => true);
SELECT count(*) - :jobs1 AS new_jobs FROM jq.jobs;

-- alter_queue: invalid values are 22023 and leave the row unchanged.
SELECT max_attempts, lease, max_concurrency, backoff_base, retention, max_lease_expiries
FROM jq.queues WHERE name = 'bad_input';
SELECT jq.alter_queue('bad_input', max_attempts => 0);
SELECT jq.alter_queue('bad_input', lease => interval '0');
SELECT jq.alter_queue('bad_input', lease => interval '-1 minute', max_attempts => 3);
SELECT jq.alter_queue('bad_input', max_concurrency => -1);
SELECT jq.alter_queue('bad_input', backoff_base => interval '-1 second');
SELECT jq.alter_queue('bad_input', retention => interval '-1 day');
SELECT jq.alter_queue('bad_input', max_lease_expiries => -1);
SELECT max_attempts, lease, max_concurrency, backoff_base, retention, max_lease_expiries
FROM jq.queues WHERE name = 'bad_input';

SELECT jq.drop_queue('bad_input', force => true);
