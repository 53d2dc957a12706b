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

    pub(crate) fn rollback(&mut self) {
        self.client.batch_execute("ROLLBACK").expect("ROLLBACK");
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
