//! Fingerprints of what jq puts in a database, to compare two databases: a fresh install with
//! an upgraded one (pg_test/tests/upgrade.rs), a dumped database with its restore
//! (pg_test/tests/dump_restore.rs), the rows before and after an upgrade.
//!
//! [`catalog`] reads the catalog definition of every member of the extension (pg_depend
//! deptype 'e') and of what hangs off them, as `key -> value` lines:
//! - functions: pg_get_functiondef (body, volatility, SECURITY DEFINER, SET options, defaults),
//!   owner, ACL, prosecdef, proconfig, comment;
//! - tables: columns (type, not null, default, identity, generated, collation, column ACL,
//!   comment), constraints (pg_get_constraintdef), indexes (pg_get_indexdef), triggers, policies,
//!   rules, row security, persistence, reloptions, owner, ACL, comment; views: pg_get_viewdef;
//!   sequences: their parameters and owning column;
//! - types: enum labels in order, composite attributes in order, domains, ranges, owner, ACL;
//! - the extension row (version, extconfig with extcondition), every pg_init_privs row recorded
//!   by an extension script (privtype 'e'), the schema jq (owner, ACL, comment), default ACLs,
//!   and objects in schema jq that are not members of the extension.
//!
//! ACLs are compared as sorted sets with NULL read as the default ACL (acldefault), so the order
//! of GRANTs does not matter but what they grant does.
//!
//! Column order: a column added by ALTER TABLE … ADD COLUMN goes last, whereas the fresh install
//! may declare it in the middle. Order matters to callers only where a row of the table is handed
//! out whole (`SELECT * FROM jq.create_queue(…)` returns a jq.queues row, `jq.schedule` a
//! jq.schedules row; `SELECT *` from the table itself): for a table whose row type a member
//! function takes or returns, or a column uses, the order is part of the fingerprint; for the
//! others it is an informational line (key ending in `[info]`) that [`diff`] reports without
//! counting it as a difference.

use postgres::Client;
use std::collections::BTreeMap;

/// One row per fingerprint line: (key, value). Kept in one statement so that both databases
/// are read the same way.
const CATALOG_SQL: &str = r#"
WITH ext AS (SELECT e.* FROM pg_extension e WHERE e.extname = 'jq'),
m AS (SELECT d.classid, d.objid FROM pg_depend d, ext
      WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
fn AS (SELECT p.* FROM pg_proc p JOIN m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid),
rel AS (SELECT c.* FROM pg_class c JOIN m ON m.classid = 'pg_class'::regclass AND m.objid = c.oid),
typ AS (SELECT t.* FROM pg_type t JOIN m ON m.classid = 'pg_type'::regclass AND m.objid = t.oid),
-- Row types whose column order callers see: taken or returned by a member function, or used as
-- a column type.
ordered AS (
    SELECT DISTINCT r.oid FROM rel r
    WHERE EXISTS (SELECT 1 FROM fn WHERE fn.prorettype = r.reltype OR r.reltype = ANY (fn.proargtypes)
                  OR r.reltype = ANY (coalesce(fn.proallargtypes, '{}')))
       OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.atttypid = r.reltype AND NOT a.attisdropped)
)
SELECT key, value FROM (
    -- every member, by identity
    SELECT 'member ' || i.type || ' ' || i.identity AS key, '' AS value
    FROM m, pg_identify_object(m.classid, m.objid, 0) i
  UNION ALL
    -- functions
    SELECT 'function ' || fn.oid::regprocedure::text || ' ' || x.k, x.v
    FROM fn, LATERAL (VALUES
        ('definition', CASE WHEN fn.prokind = 'a'
                            THEN (SELECT row(a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggtranstype::regtype,
                                             a.agginitval)::text FROM pg_aggregate a WHERE a.aggfnoid = fn.oid)
                            ELSE pg_get_functiondef(fn.oid) END),
        ('owner', fn.proowner::regrole::text),
        ('acl', (SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(coalesce(fn.proacl, acldefault('f', fn.proowner))) a)),
        ('security definer', fn.prosecdef::text),
        ('config', coalesce(fn.proconfig::text, '')),
        ('comment', coalesce(obj_description(fn.oid, 'pg_proc'), ''))
    ) x(k, v)
  UNION ALL
    -- relations (tables, views, sequences)
    SELECT 'relation ' || r.oid::regclass::text || ' ' || x.k, x.v
    FROM rel r, LATERAL (VALUES
        ('kind', r.relkind::text || ' persistence ' || r.relpersistence::text || ' replica identity ' || r.relreplident::text),
        ('owner', r.relowner::regrole::text),
        ('acl', (SELECT string_agg(a::text, ' ' ORDER BY a::text)
                 FROM unnest(coalesce(r.relacl, acldefault((CASE WHEN r.relkind = 'S' THEN 's' ELSE 'r' END)::"char", r.relowner))) a)),
        ('options', coalesce((SELECT string_agg(o, ',' ORDER BY o) FROM unnest(r.reloptions) o), '')),
        ('row security', r.relrowsecurity::text || ' force ' || r.relforcerowsecurity::text),
        ('comment', coalesce(obj_description(r.oid, 'pg_class'), '')),
        ('view definition', CASE WHEN r.relkind IN ('v', 'm') THEN pg_get_viewdef(r.oid, true) END),
        ('sequence', (SELECT format('%s start %s increment %s min %s max %s cache %s cycle %s',
                                    format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin,
                                    s.seqmax, s.seqcache, s.seqcycle)
                      FROM pg_sequence s WHERE s.seqrelid = r.oid)),
        ('owned by', CASE WHEN r.relkind = 'S' THEN
             coalesce((SELECT string_agg(pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ',')
                       FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = r.oid
                         AND d.deptype IN ('a', 'i') AND d.refclassid = 'pg_class'::regclass), '') END),
        (CASE WHEN r.oid IN (SELECT oid FROM ordered) THEN 'column order' ELSE 'column order [info]' END,
         CASE WHEN r.relkind IN ('r', 'p', 'v', 'm', 'f') THEN
             (SELECT string_agg(a.attname, ', ' ORDER BY a.attnum) FROM pg_attribute a
              WHERE a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped) END)
    ) x(k, v)
    WHERE x.v IS NOT NULL
  UNION ALL
    -- columns, as a set by name
    SELECT 'relation ' || r.oid::regclass::text || ' column ' || a.attname,
           format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
           || coalesce(' DEFAULT ' || pg_get_expr(ad.adbin, ad.adrelid), '')
           || CASE WHEN a.attidentity <> '' THEN ' IDENTITY ' || a.attidentity::text ELSE '' END
           || CASE WHEN a.attgenerated <> '' THEN ' GENERATED ' || a.attgenerated::text ELSE '' END
           || CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                   THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END
           || coalesce(' ACL ' || (SELECT string_agg(x::text, ' ' ORDER BY x::text) FROM unnest(a.attacl) x), '')
           || coalesce(' COMMENT ' || col_description(r.oid, a.attnum), '')
    FROM rel r
    JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped AND r.relkind <> 'S'
    JOIN pg_type t ON t.oid = a.atttypid
    LEFT JOIN pg_attrdef ad ON ad.adrelid = r.oid AND ad.adnum = a.attnum
  UNION ALL
    SELECT 'relation ' || r.oid::regclass::text || ' constraint ' || co.conname,
           pg_get_constraintdef(co.oid, true) || coalesce(' COMMENT ' || obj_description(co.oid, 'pg_constraint'), '')
    FROM rel r JOIN pg_constraint co ON co.conrelid = r.oid
  UNION ALL
    SELECT 'relation ' || r.oid::regclass::text || ' index ' || i.indexrelid::regclass::text,
           pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisclustered THEN ' CLUSTER' ELSE '' END
           || coalesce(' COMMENT ' || obj_description(i.indexrelid, 'pg_class'), '')
    FROM rel r JOIN pg_index i ON i.indrelid = r.oid
  UNION ALL
    SELECT 'relation ' || r.oid::regclass::text || ' trigger ' || tg.tgname,
           pg_get_triggerdef(tg.oid, true) || ' enabled ' || tg.tgenabled::text
    FROM rel r JOIN pg_trigger tg ON tg.tgrelid = r.oid AND NOT tg.tgisinternal
  UNION ALL
    SELECT 'relation ' || r.oid::regclass::text || ' policy ' || po.polname,
           format('%s permissive %s to %s using %s check %s', po.polcmd, po.polpermissive,
                  (SELECT string_agg(CASE WHEN ro = 0 THEN 'public' ELSE ro::regrole::text END, ',' ORDER BY 1)
                   FROM unnest(po.polroles) ro),
                  pg_get_expr(po.polqual, po.polrelid), pg_get_expr(po.polwithcheck, po.polrelid))
    FROM rel r JOIN pg_policy po ON po.polrelid = r.oid
  UNION ALL
    SELECT 'relation ' || r.oid::regclass::text || ' rule ' || ru.rulename, pg_get_ruledef(ru.oid, true)
    FROM rel r JOIN pg_rewrite ru ON ru.ev_class = r.oid AND ru.rulename <> '_RETURN'
  UNION ALL
    -- types
    SELECT 'type ' || t.oid::regtype::text || ' ' || x.k, x.v
    FROM typ t, LATERAL (VALUES
        ('kind', t.typtype::text),
        ('owner', t.typowner::regrole::text),
        ('acl', (SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(coalesce(t.typacl, acldefault('T', t.typowner))) a)),
        ('comment', coalesce(obj_description(t.oid, 'pg_type'), '')),
        ('enum labels', (SELECT string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid)),
        -- a composite type's attributes in order: it is the row shape callers read
        ('attributes', CASE WHEN t.typtype = 'c' THEN
             (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
              FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) END),
        ('domain', CASE WHEN t.typtype = 'd' THEN
             format_type(t.typbasetype, t.typtypmod) || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
             || coalesce(' DEFAULT ' || t.typdefault, '')
             || coalesce((SELECT ' ' || string_agg(co.conname || ' ' || pg_get_constraintdef(co.oid, true), ' ' ORDER BY co.conname)
                          FROM pg_constraint co WHERE co.contypid = t.oid), '') END),
        ('range', (SELECT format_type(rg.rngsubtype, NULL) FROM pg_range rg WHERE rg.rngtypid = t.oid))
    ) x(k, v)
    WHERE x.v IS NOT NULL
  UNION ALL
    -- the extension row: version and which tables pg_dump dumps (extconfig / extcondition)
    SELECT 'extension ' || x.k, x.v
    FROM ext, LATERAL (VALUES
        ('version', ext.extversion),
        ('relocatable', ext.extrelocatable::text),
        ('schema', ext.extnamespace::regnamespace::text),
        ('config', coalesce((SELECT string_agg(u.o::regclass::text || ' WHERE ' || coalesce(u.c, ''), '; ' ORDER BY u.o::regclass::text)
                            FROM unnest(ext.extconfig, ext.extcondition) u(o, c)), ''))
    ) x(k, v)
  UNION ALL
    -- privileges recorded by extension scripts: what pg_dump takes as the initial ACLs
    SELECT 'init privs ' || pg_describe_object(ip.classoid, ip.objoid, ip.objsubid),
           (SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(ip.initprivs) a)
    FROM pg_init_privs ip WHERE ip.privtype = 'e'
  UNION ALL
    SELECT 'schema ' || n.nspname || ' ' || x.k, x.v
    FROM pg_namespace n, ext, LATERAL (VALUES
        ('owner', n.nspowner::regrole::text),
        ('acl', (SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(coalesce(n.nspacl, acldefault('n', n.nspowner))) a)),
        ('comment', coalesce(obj_description(n.oid, 'pg_namespace'), ''))
    ) x(k, v)
    WHERE n.oid = ext.extnamespace
  UNION ALL
    SELECT 'default acl ' || da.defaclrole::regrole::text || ' in ' || coalesce(da.defaclnamespace::regnamespace::text, 'all schemas')
           || ' on ' || da.defaclobjtype::text,
           (SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(da.defaclacl) a)
    FROM pg_default_acl da
  UNION ALL
    -- objects in jq's schema that the extension does not own (the row types of tables, array
    -- types, indexes and toast tables hang off members and are not listed)
    SELECT 'not a member: ' || pg_describe_object(o.classid, o.objid, 0), ''
    FROM ext, LATERAL (
        SELECT 'pg_proc'::regclass AS classid, p.oid AS objid FROM pg_proc p WHERE p.pronamespace = ext.extnamespace
        UNION ALL
        SELECT 'pg_class'::regclass, c.oid FROM pg_class c
        WHERE c.relnamespace = ext.extnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
        UNION ALL
        SELECT 'pg_type'::regclass, t.oid FROM pg_type t
        WHERE t.typnamespace = ext.extnamespace AND t.typtype IN ('e', 'd', 'r', 'b', 'm') AND t.typcategory <> 'A'
           OR (t.typnamespace = ext.extnamespace AND t.typtype = 'c'
               AND (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c')
    ) o
    WHERE NOT EXISTS (SELECT 1 FROM m WHERE m.classid = o.classid AND m.objid = o.objid)
) f
ORDER BY key
"#;

/// The catalog fingerprint of jq in the database of `c` (see the module documentation).
/// Panics if two lines share a key.
pub fn catalog(c: &mut Client) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for row in c.query(CATALOG_SQL, &[]).expect("catalog fingerprint query") {
        let key: String = row.get(0);
        let value: Option<String> = row.get(1);
        let value = value.unwrap_or_else(|| "<NULL>".into());
        if let Some(old) = out.insert(key.clone(), value.clone()) {
            panic!("fingerprint key {key:?} twice: {old:?} and {value:?}");
        }
    }
    assert!(out.keys().any(|k| k.starts_with("member ")), "jq is not installed in this database");
    out
}

/// The differences between two fingerprints as readable text, one block per key; empty when
/// they agree. Lines whose key ends in `[info]` are listed after a separator but do not count:
/// the second element says how many blocks counted.
pub fn diff(a_name: &str, a: &BTreeMap<String, String>, b_name: &str, b: &BTreeMap<String, String>) -> (String, usize) {
    let mut out = String::new();
    let mut info = String::new();
    let mut counted = 0;
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let block = match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) if x == y => continue,
            (Some(x), None) => format!("--- {key}\n    only in {a_name}: {}\n", one_line(x)),
            (None, Some(y)) => format!("--- {key}\n    only in {b_name}: {}\n", one_line(y)),
            (Some(x), Some(y)) => {
                if x.lines().count() > 1 || y.lines().count() > 1 {
                    format!("--- {key} (- {a_name}, + {b_name})\n{}", line_diff(x, y))
                } else {
                    format!("--- {key}\n    {a_name}: {x}\n    {b_name}: {y}\n")
                }
            }
            (None, None) => unreachable!(),
        };
        if key.ends_with("[info]") {
            info.push_str(&block);
        } else {
            counted += 1;
            out.push_str(&block);
        }
    }
    if !info.is_empty() {
        out.push_str("=== informational (not counted):\n");
        out.push_str(&info);
    }
    (out, counted)
}

fn one_line(s: &str) -> String {
    if s.lines().count() <= 1 {
        s.to_string()
    } else {
        format!("\n{}", s.lines().map(|l| format!("      {l}\n")).collect::<String>())
    }
}

/// A line diff of two texts (longest common subsequence): `-` lines only in `a`, `+` only in
/// `b`, two lines of context around each change.
pub fn line_diff(a: &str, b: &str) -> String {
    let x: Vec<&str> = a.lines().collect();
    let y: Vec<&str> = b.lines().collect();
    let (n, m) = (x.len(), y.len());
    let mut l = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if x[i] == y[j] { l[i + 1][j + 1] + 1 } else { l[i + 1][j].max(l[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && x[i] == y[j] {
            ops.push((' ', x[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || l[i + 1][j] >= l[i][j + 1]) {
            ops.push(('-', x[i]));
            i += 1;
        } else {
            ops.push(('+', y[j]));
            j += 1;
        }
    }
    let near = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|o| o.0 != ' ');
    let mut out = String::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped {
                out.push_str("    ...\n");
                skipped = false;
            }
            out.push_str(&format!("  {op} {line}\n"));
        } else {
            skipped = true;
        }
    }
    out
}

/// The rows of every table of the extension (`to_jsonb` of each row, sorted) and the state of
/// its sequences, keyed by relation name: to compare a database's content before and after an
/// upgrade, or with its restore.
pub fn contents(c: &mut Client) -> BTreeMap<String, Vec<String>> {
    let rels: Vec<(String, String)> = c
        .query(
            "SELECT c.oid::regclass::text, c.relkind::text
             FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
             WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
               AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'jq')
               AND c.relkind IN ('r', 'p', 'S')
             ORDER BY 1",
            &[],
        )
        .expect("list jq's tables")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut out = BTreeMap::new();
    for (rel, kind) in rels {
        // The rotation timing of the history rings: not dumped, rewritten by CREATE EXTENSION
        // (sql/schema.sql), and its `since` is the install's time.
        if rel == "jq.history_rings" {
            continue;
        }
        let sql = if kind == "S" {
            format!("SELECT format('last_value %s is_called %s', last_value, is_called) FROM {rel}")
        } else {
            format!("SELECT to_jsonb(t)::text FROM {rel} t ORDER BY 1")
        };
        let rows = c.query(&sql, &[]).unwrap_or_else(|e| panic!("read {rel}: {e}"));
        out.insert(rel, rows.iter().map(|r| r.get(0)).collect());
    }
    out
}
