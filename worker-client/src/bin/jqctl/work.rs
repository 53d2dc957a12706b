//! `jqctl work`: a worker whose handler runs a command per job.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use worker_client::{parse_duration, HandlerResult, Job, StatementMode, Worker};

use crate::progress_file::{self, ProgressFile};
use crate::{Cli, CliResult};

/// Largest stdout kept as a job's result.
const MAX_RESULT_BYTES: usize = 1 << 20;
/// How much of stderr a failure message keeps (its end).
const STDERR_TAIL_BYTES: usize = 2000;

#[derive(Args, Debug)]
pub struct WorkArgs {
    /// Queue to work (repeat for several; earlier queues are served first).
    #[arg(long = "queue", short = 'Q', required = true, value_name = "QUEUE")]
    pub queues: Vec<String>,
    /// Commands running at once.
    #[arg(long, short = 'c', default_value_t = 4)]
    pub concurrency: usize,
    /// Per-job time limit (500ms, 30s, 5m, 1h); a command still running then is killed and
    /// the job failed.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Lease asked for at claim and heartbeat (default: the queue's).
    #[arg(long, value_parser = parse_duration)]
    pub lease: Option<Duration>,
    /// Heartbeat interval (default: a third of the lease).
    #[arg(long, value_parser = parse_duration)]
    pub heartbeat: Option<Duration>,
    /// On SIGTERM/SIGINT, how long running commands may take to finish before they are
    /// stopped and their jobs released.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub grace: Duration,
    /// Most jobs per claim (default: the concurrency).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Worker name recorded with each claim and in the fleet registry (default HOSTNAME:PID).
    #[arg(long, visible_alias = "name")]
    pub worker: Option<String>,
    /// Do not register in jq's fleet registry (jq.fleet, `jqctl workers`); also JQ_REGISTER=0.
    #[arg(long)]
    pub no_register: bool,
    /// Longest idle long-poll claim, when jq supports it.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub idle_wait: Duration,
    /// How statements are sent: `prepared` (once per connection, then only bound and run: the
    /// default) or `unprepared` (one unnamed round trip each), for a transaction-mode pooler
    /// without prepared-statement support. A prepared connection switches to unprepared by
    /// itself when the server does not hold its statements.
    #[arg(long, env = "JQ_STATEMENT_MODE", value_name = "MODE", value_parser = parse_statement_mode)]
    pub statement_mode: Option<StatementMode>,
    /// How long one database call may go without an answer before its connection is dropped
    /// and the call retried on a new one (a long-poll claim: plus --idle-wait). Default 5s.
    #[arg(long, env = "JQ_CALL_TIMEOUT", value_name = "D", value_parser = parse_duration)]
    pub call_timeout: Option<Duration>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn parse_statement_mode(s: &str) -> Result<StatementMode, String> {
    s.parse().map_err(|e: worker_client::Error| e.to_string())
}

/// Whether `cmd` names an executable file, directly or through PATH — checked before any job
/// is claimed, so a typo does not fail every job of the queue.
fn command_exists(cmd: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let path = std::path::Path::new(cmd);
    if path.components().count() > 1 || cmd.to_string_lossy().contains('/') {
        return runnable(path);
    }
    std::env::var_os("PATH").is_some_and(|dirs| std::env::split_paths(&dirs).any(|d| runnable(&d.join(cmd))))
}

pub async fn run(cli: &Cli, a: &WorkArgs) -> CliResult {
    if !command_exists(&a.command[0]) {
        return Err(format!("command not found or not executable: {}", a.command[0].to_string_lossy()).into());
    }
    let mut config = worker_client::config_from_env(cli.database_url.as_deref())?;
    if config.pg().get_application_name() == Some("jq-worker-client") {
        config.pg_mut().application_name("jqctl-work");
    }
    let argv = Arc::new(a.command.clone());
    let mut b = Worker::builder(config)
        .queues(a.queues.iter().cloned())
        .concurrency(a.concurrency)
        .shutdown_grace(a.grace)
        .idle_wait(a.idle_wait);
    for q in &a.queues {
        let argv = argv.clone();
        b = b.fallback(q.clone(), move |job: Job| run_command(job, argv.clone()));
    }
    if let Some(t) = a.timeout {
        b = b.job_timeout(t);
    }
    if let Some(l) = a.lease {
        b = b.lease(l);
    }
    if let Some(h) = a.heartbeat {
        b = b.heartbeat_interval(h);
    }
    if let Some(n) = a.batch {
        b = b.claim_batch(n);
    }
    if let Some(w) = &a.worker {
        b = b.worker_name(w.clone());
    }
    if a.no_register {
        b = b.register(false);
    }
    if let Some(m) = a.statement_mode {
        b = b.statement_mode(m);
    }
    if let Some(t) = a.call_timeout {
        b = b.call_timeout(t);
    }
    let worker = b.build()?;
    let s = worker.run().await?;
    eprintln!(
        "jqctl work: claimed {}, completed {}, failed {}, released {}, snoozed {}, lost {}",
        s.claimed, s.completed, s.failed, s.released, s.snoozed, s.lost
    );
    Ok(())
}

/// Kills the command's whole process group (it runs in a group of its own) unless disarmed:
/// on drop, i.e. when the worker drops the handler for a timeout or at the end of shutdown.
struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    fn signal(&self, sig: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
            unsafe {
                libc::kill(-pgid, sig);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// How long the pipes are read after the command exited: what it wrote is already in them, so
/// this only bounds the wait for a background child that inherited them and keeps them open
/// (tests/commands.rs, `a_job_ends_when_its_command_exits_not_when_its_background_children_do`).
const PIPES_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Reads `r` to its end into `out`, keeping the first `cap` bytes; sets `over` past them.
async fn read_capped<R: AsyncRead + Unpin>(mut r: R, cap: usize, out: &mut Vec<u8>, over: &mut bool) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.len() + n > cap {
                    *over = true;
                    let room = cap.saturating_sub(out.len());
                    out.extend_from_slice(&buf[..room]);
                } else {
                    out.extend_from_slice(&buf[..n]);
                }
            }
        }
    }
}

/// Reads `r` to its end into `out`, keeping at most its last `2 * keep` bytes (trimmed to
/// `keep` by [`last`]).
async fn read_tail<R: AsyncRead + Unpin>(mut r: R, keep: usize, out: &mut Vec<u8>) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > 2 * keep {
                    out.drain(..out.len() - keep);
                }
            }
        }
    }
}

/// The last `keep` bytes of `v`.
fn last(mut v: Vec<u8>, keep: usize) -> Vec<u8> {
    if v.len() > keep {
        v.drain(..v.len() - keep);
    }
    v
}

fn describe_status(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "abnormal exit".into(),
    }
}

/// Runs the command for one job. See `jqctl work --help` for the contract.
async fn run_command(job: Job, argv: Arc<Vec<OsString>>) -> HandlerResult {
    let mut progress = ProgressFile::create(job.id).map_err(|e| format!("cannot create the progress file: {e}"))?;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("JQ_PROGRESS_FILE", &progress.path)
        .env("JQ_PROGRESS", job.progress.as_ref().map(|p| p.to_string()).unwrap_or_default())
        .env("JQ_JOB_ID", job.id.to_string())
        .env("JQ_QUEUE", &job.queue)
        .env("JQ_KIND", &job.kind)
        .env("JQ_ATTEMPT", job.attempt.to_string())
        .env("JQ_MAX_ATTEMPTS", job.max_attempts.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own: a terminal's Ctrl-C goes to jqctl only (which then shuts down
        // gracefully), and stopping the job reaches the command's children too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0].to_string_lossy()))?;
    let mut guard = GroupGuard { pgid: child.id().map(|p| p as i32) };
    let payload = serde_json::to_vec(&job.payload)?;
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let write = async move {
        // A command that does not read its stdin is fine (broken pipe ignored).
        let _ = stdin.write_all(&payload).await;
        let _ = stdin.shutdown().await;
    };
    let (mut out, mut over, mut err) = (Vec::new(), false, Vec::new());
    let mut all = Box::pin(async {
        let reading = async {
            tokio::join!(read_capped(stdout, MAX_RESULT_BYTES, &mut out, &mut over), read_tail(stderr, STDERR_TAIL_BYTES, &mut err));
        };
        tokio::pin!(reading);
        let exited = async { tokio::join!(write, child.wait()).1 };
        tokio::pin!(exited);
        // The job ends when the command exits: the pipes are read on for PIPES_AFTER_EXIT at
        // most, not until every process that inherited them has closed them.
        tokio::select! {
            status = &mut exited => {
                let _ = tokio::time::timeout(PIPES_AFTER_EXIT, &mut reading).await;
                status
            }
            _ = &mut reading => exited.await,
        }
    });
    let mut tick = tokio::time::interval(progress_file::POLL);
    let status = loop {
        tokio::select! {
            r = &mut all => break r,
            _ = job.cancelled() => {
                // jq.cancel, a lost lease or the end of the shutdown grace: ask the command to
                // stop; if it does not, the worker drops this future and the guard kills it.
                guard.signal(libc::SIGTERM);
                break all.as_mut().await;
            }
            _ = tick.tick() => progress.forward(&job),
        }
    };
    drop(all);
    let err = last(err, STDERR_TAIL_BYTES);
    let status = status.map_err(|e| format!("waiting for the command: {e}"))?;
    guard.pgid = None; // exited: nothing left to kill (its background children are its own)
    if status.success() {
        if over {
            tracing::warn!(job = job.id, "stdout over {} bytes: result not stored", MAX_RESULT_BYTES);
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&out);
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        match serde_json::from_str(text) {
            Ok(v) => Ok(Some(v)),
            Err(_) => {
                tracing::debug!(job = job.id, "stdout is not JSON: result not stored");
                Ok(None)
            }
        }
    } else {
        let tail = String::from_utf8_lossy(&err);
        let tail = tail.trim();
        let cancelled = if job.is_cancelled() { " after it was asked to stop" } else { "" };
        if tail.is_empty() {
            Err(format!("{}{cancelled}", describe_status(status)).into())
        } else {
            Err(format!("{}{cancelled}: {tail}", describe_status(status)).into())
        }
    }
}
