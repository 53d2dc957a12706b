//! pg_dump keeps jq's data: extension tables are left out of dumps unless registered with
//! pg_extension_config_dump, which would silently lose every queue, job and history row. Seen
//! failing: with the registration removed (pg_extension.extconfig cleared in a scratch
//! database), pg_dump writes no COPY for jq's tables at all.

use jq_pg_test::{claim, complete, conninfo, TestDb};
use std::process::Command;

fn pg_bin(name: &str) -> String {
    format!("{}/{name}", std::env::var("JQ_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into()))
}

#[test]
fn pg_dump_and_pg_restore_keep_queues_jobs_history_and_the_id_sequence() {
    let src = TestDb::new("dumpsrc");
    let mut c = src.connect();
    c.batch_execute(
        "SELECT jq.create_queue('d', max_attempts => 7);
         SELECT jq.enqueue('d', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
         SELECT jq.enqueue('d', '{}', delay => '1 hour');",
    )
    .unwrap();
    for job in claim(&mut c, "d", "w", 2, None) {
        assert!(complete(&mut c, &job));
    }
    let dump = std::env::temp_dir().join(format!("jq-dump-{}.pgc", std::process::id()));
    let ok = Command::new(pg_bin("pg_dump"))
        .args(["-Fc", "-f", dump.to_str().unwrap(), "-d", &conninfo(&src.name)])
        .status()
        .expect("run pg_dump");
    assert!(ok.success(), "pg_dump failed");

    let dst = TestDb::new("dumpdst");
    // An empty database: TestDb installs the extension, and its schema outlives DROP EXTENSION.
    dst.connect().batch_execute("DROP EXTENSION jq; DROP SCHEMA jq").unwrap();
    let ok = Command::new(pg_bin("pg_restore"))
        .args(["--exit-on-error", "-d", &conninfo(&dst.name), dump.to_str().unwrap()])
        .status()
        .expect("run pg_restore");
    let _ = std::fs::remove_file(&dump);
    assert!(ok.success(), "pg_restore failed");

    let mut r = dst.connect();
    let row = r
        .query_one(
            "SELECT claimable, scheduled, completed, (SELECT max_attempts FROM jq.queues WHERE name = 'd'),
                    (SELECT count(*) FROM jq.executions)
             FROM jq.queue_stats WHERE queue = 'd'",
            &[],
        )
        .unwrap();
    let got: (i64, i64, i64, i32, i64) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(got, (3, 1, 2, 7, 2));
    // The restored database works, and new ids continue after the restored ones.
    let id: i64 = r.query_one("SELECT jq.enqueue('d', '{}')", &[]).unwrap().get(0);
    assert_eq!(id, 7);
    assert_eq!(claim(&mut r, "d", "w", 10, None).len(), 4);
}
