-- The last part of the upgrade jq 0.1.0 -> 0.2.0, written by hand: run after 0.2.0's functions,
-- views and grants exist (tools/upgrade-script appends it; docs/upgrades.md).
--
-- Default privileges a DBA set on schema jq (ALTER DEFAULT PRIVILEGES IN SCHEMA jq GRANT SELECT
-- ON TABLES ..., as 0.1.0's docs invited) gave the relations this upgrade created (jq.jobs, the
-- views) to their roles: take them back, as jq--0.1.0--0.2.0.schema.sql did for the tables that
-- were there. jq's own roles keep what sql/grants.sql granted them.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT c.oid::regclass AS rel, pg_catalog.format('jq.%I', c.relname) AS label,
                    c.relkind, a.grantee::regrole AS grantee
             FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.relnamespace = 'jq'::regnamespace AND c.relkind IN ('r', 'S', 'v')
               AND a.grantee <> c.relowner AND a.grantee <> 0
               AND a.grantee::regrole::text NOT IN ('jq_admin', 'jq_producer', 'jq_worker')
    LOOP
        -- WARNING, not NOTICE: PostgreSQL raises client_min_messages to WARNING while it runs
        -- an extension script, so a NOTICE would never reach the DBA.
        RAISE WARNING 'jq 0.2.0: revoking the privileges of role % on %; give it queues with jq.grant', r.grantee, r.label;
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, r.rel, r.grantee);
    END LOOP;
END $$;
