//! The functions as they really run: auto_explain's plan of every statement inside them, read from the notices.

use std::sync::{Arc, Mutex};
use jq_pg_test::{conninfo, Client, NoTls, TestDb};
use serde_json::Value;

use super::plan_tree::Explained;
use super::statements::{norm, Mode};

/// A connection on which auto_explain reports the plan (with actual rows) of every statement,
/// including those inside jq's plpgsql functions, as a NOTICE that lands in `notices`.
pub(crate) struct Traced {
    pub(crate) client: Client,
    pub(crate) notices: Arc<Mutex<Vec<String>>>,
    mode: Mode,
}

impl Traced {
    pub(crate) fn connect(db: &TestDb) -> Traced {
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        let mut config: postgres::Config = conninfo(&db.name).parse().expect("conninfo");
        config.notice_callback(move |n| sink.lock().unwrap().push(n.message().to_string()));
        let mut client = config.connect(NoTls).expect("connect");
        client
            .batch_execute(
                "LOAD 'auto_explain';
                 SET auto_explain.log_min_duration = 0;
                 SET auto_explain.log_nested_statements = on;
                 SET auto_explain.log_analyze = on;
                 SET auto_explain.log_buffers = on;
                 SET auto_explain.log_timing = off;
                 SET auto_explain.log_format = json;
                 SET auto_explain.log_level = notice;
                 SET client_min_messages = notice;",
            )
            .expect("auto_explain (contrib) must be installed");
        Traced { client, notices, mode: Mode::Auto }
    }

    pub(crate) fn begin(&mut self, mode: Mode) {
        self.client
            .batch_execute(&format!("BEGIN; SET LOCAL plan_cache_mode = {}", mode.setting()))
            .expect("BEGIN");
        self.notices.lock().unwrap().clear();
        self.mode = mode;
    }

    /// Runs `sql` and returns its rows and the plans of every statement it executed.
    pub(crate) fn run(&mut self, sql: &str) -> (Vec<postgres::Row>, Vec<Explained>) {
        self.notices.lock().unwrap().clear();
        let rows = self.client.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let notices = std::mem::take(&mut *self.notices.lock().unwrap());
        let plans = notices
            .iter()
            .filter_map(|n| {
                let json: Value = serde_json::from_str(&n[n.find('{')?..]).ok()?;
                let text = json.get("Query Text")?.as_str()?.to_string();
                Some(Explained { label: format!("[traced {sql}; plan_cache_mode {}]\n  statement: {}",
                                                 self.mode.setting(), norm(&text)),
                                 root: json.get("Plan")?.clone() })
            })
            .collect();
        (rows, plans)
    }

    /// Rolls the traced transaction back and removes what it left in jq.jobs's indexes.
    ///
    /// A rolled-back UPDATE leaves a second index entry for each row it touched, so the next
    /// transaction that touches the same rows (the next plan_cache_mode's claim, promotion or
    /// reaping picks the same best rows again) may meet a Bitmap Index Scan returning two
    /// entries per row, and check_bounded_reads would count a read the statement does not make
    /// in production. Versions written by an aborted transaction are dead whatever the xmin
    /// horizon, so this VACUUM removes them and their index entries (INDEX_CLEANUP ON: never
    /// skipped as "too few to bother"). Seen failing without it, not kept: the batch claim's
    /// UPDATE under plan_cache_mode = force_generic_plan read `jobs_pkey` through a Bitmap Index
    /// Scan returning 20 entries for a batch of 10 once ANALYZE statistics made the planner
    /// prefer the bitmap. Forcing bitmaps (`SET enable_indexscan = off` on the traced session,
    /// which also fails the ordered-pick checks) gave jobs_pkey entry counts of 20, 30 and 200
    /// for batches of 10, 10 and 100 on every run without this VACUUM, and none above the batch
    /// with it.
    pub(crate) fn rollback(&mut self) {
        self.client.batch_execute("ROLLBACK").expect("ROLLBACK");
        self.client.batch_execute("VACUUM (INDEX_CLEANUP ON) jq.jobs").expect("VACUUM jq.jobs");
    }
}

/// The traced plans of statements whose text contains `marker` (whitespace-insensitive).
pub(crate) fn statements<'a>(plans: &'a [Explained], marker: &str) -> Vec<&'a Explained> {
    let marker = norm(marker);
    plans.iter().filter(|e| e.label.contains(&marker)).collect()
}

pub(crate) fn one_statement<'a>(plans: &'a [Explained], marker: &str, call: &str) -> &'a Explained {
    let found = statements(plans, marker);
    assert!(found.len() == 1,
            "{call}: expected one traced statement containing {marker:?}, found {}; traced: {:#?}",
            found.len(), plans.iter().map(|e| e.label.as_str()).collect::<Vec<_>>());
    found[0]
}

/// The one statement of a traced call that locks and picks jobs, and that selection.
pub(crate) fn picking_statement<'a>(plans: &'a [Explained], call: &str) -> (&'a Explained, Explained) {
    let found: Vec<(&Explained, Explained)> =
        plans.iter().filter_map(|e| e.pick().map(|p| (e, p))).collect();
    assert!(found.len() == 1,
            "{call}: expected one statement with a FOR UPDATE selection of jq.jobs, found {}; \
             traced: {:#?}", found.len(), plans.iter().map(|e| e.label.as_str()).collect::<Vec<_>>());
    found.into_iter().next().unwrap()
}
