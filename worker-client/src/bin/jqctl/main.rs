//! `jqctl`: drive jq from the shell, and make any program a job handler (`jqctl work`).
//!
//! Run `jqctl --help` for the commands; docs/worker-client.md and the README describe them.

mod admin;
#[cfg(feature = "dashboard")]
mod dashboard;
mod enqueue;
mod listings;
mod metrics;
mod progress_file;
mod table;
mod timeout;
mod work;
mod workers;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Command line for jq, the job queue inside PostgreSQL.
///
/// Connects with --database-url, else DATABASE_URL, else the libpq environment variables
/// (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD) as psql does. TLS as libpq: sslmode
/// (disable, prefer, require, verify-ca, verify-full) and sslrootcert in the URL, or
/// PGSSLMODE and PGSSLROOTCERT.
#[derive(Parser, Debug)]
#[command(name = "jqctl", version, propagate_version = true)]
pub struct Cli {
    /// PostgreSQL URL (postgresql://user@host:port/db?sslmode=verify-full&sslrootcert=ca.pem)
    /// or key=value connection string.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// More log output (debug); give twice for trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only warnings and errors in the log output.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command once per job (a worker).
    ///
    /// Runs CMD once per job: payload JSON on stdin, JQ_JOB_ID, JQ_QUEUE, JQ_KIND, JQ_ATTEMPT,
    /// JQ_MAX_ATTEMPTS in the environment; exit 0 completes the job (stdout is stored as the
    /// result when it is JSON), any other exit fails it with the tail of stderr. Progress: the
    /// command appends JSON lines to the file named by JQ_PROGRESS_FILE; the last one is stored
    /// with the next heartbeat (jq.jobs.progress), and JQ_PROGRESS holds the progress an
    /// earlier attempt reported (empty if none), to resume from. Stops on
    /// SIGTERM/SIGINT: no new claims, running commands get --grace to finish, then they are
    /// sent SIGTERM (SIGKILL 2 s later) and their jobs released, not failed.
    Work(work::WorkArgs),
    /// Enqueue one job, or one per line of stdin.
    ///
    /// One job when PAYLOAD is given; otherwise (PAYLOAD absent or -) one job per line of
    /// stdin, sent in batches with jq.enqueue_many, with a progress display when stderr is a
    /// terminal.
    Enqueue(enqueue::EnqueueArgs),
    /// List queues and their settings.
    Queues {
        #[command(flatten)]
        format: table::Format,
    },
    /// Table of jq.queue_stats.
    Stats {
        /// Refresh every SECS seconds (default 2) until interrupted.
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
        #[command(flatten)]
        format: table::Format,
    },
    /// Show one job: its row, its progress and every execution (jq.executions).
    Show {
        /// Job id.
        id: i64,
        #[command(flatten)]
        format: table::Format,
    },
    /// List jobs of a queue.
    Jobs {
        /// The queue.
        #[arg(long, short = 'Q')]
        queue: String,
        /// Only jobs in this state.
        #[arg(long, value_enum)]
        state: Option<JobState>,
        /// At most this many jobs (newest first).
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        format: table::Format,
    },
    /// Put a dead or cancelled job back to ready (jq.retry).
    Retry {
        /// Job id.
        id: i64,
    },
    /// Cancel a job (jq.cancel): at once when waiting, through its worker when running.
    Cancel {
        /// Job id.
        id: i64,
    },
    /// Take back a running job now (jq.expire_lease), as the reaper does when its lease expires:
    /// ready again with the attempt refunded; its worker's later calls change nothing.
    ExpireLease {
        /// Job id.
        id: i64,
        /// Only if the job still runs under this lease (its lease_token in jq.jobs).
        #[arg(long)]
        lease_token: Option<uuid::Uuid>,
    },
    /// Stop handing out jobs of a queue (jq.pause).
    Pause {
        /// Queue name.
        queue: String,
    },
    /// Hand out jobs of a paused queue again (jq.resume).
    Resume {
        /// Queue name.
        queue: String,
    },
    /// Create a queue (jq.create_queue). Options left out take jq's defaults.
    CreateQueue(admin::CreateQueueArgs),
    /// Change a queue's options (jq.alter_queue), flow control included: --key-concurrency,
    /// --rate-limit/--rate-period/--burst, --priority-aging, --max-concurrency.
    AlterQueue(admin::AlterQueueArgs),
    /// Create or replace a cron schedule (jq.schedule).
    Schedule(admin::ScheduleArgs),
    /// Remove a cron schedule (jq.unschedule).
    Unschedule {
        /// Schedule name.
        name: String,
    },
    /// List cron schedules (jq.schedules).
    Schedules {
        #[command(flatten)]
        format: table::Format,
    },
    /// List the job kinds' policies (jq.kind_policies).
    Kinds {
        #[command(flatten)]
        format: table::Format,
    },
    /// List the worker fleet (jq.fleet): name, state (active, stale, stopped), queues, jobs
    /// held / concurrency, resident memory, start, last beat.
    Workers {
        #[command(flatten)]
        format: table::Format,
    },
    /// Create or change a job kind's policy in a queue (jq.alter_kind).
    AlterKind(admin::AlterKindArgs),
    /// Serve Prometheus metrics of the queues, tables and background worker.
    ///
    /// Per-queue gauges from jq.queue_stats (depth, claimable, running, dead, oldest claimable
    /// age, recent completions, failures and expired leases, p95 wait), table health from
    /// jq.table_health, the maintenance worker from jq.status(), and the worker fleet from
    /// jq.fleet (workers per state, jobs in flight), read afresh on every
    /// scrape of http://ADDR/metrics. Alert rules: docs/observability.md.
    Metrics(metrics::MetricsArgs),
    /// Serve the operator web UI: queues, jobs, schedules, workers, and actions on them.
    ///
    /// Shows and acts only within the jq grants of the database role it connects as. Listens
    /// on 127.0.0.1:8080 by default; a non-loopback --listen needs --token. Prints
    /// `dashboard: http://ADDR/BASE/` once listening. docs/dashboard.md.
    #[cfg(feature = "dashboard")]
    Dashboard(dashboard::DashboardArgs),
}

/// A job state, as in jq.job_state.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum JobState {
    Scheduled,
    Blocked,
    Ready,
    Running,
    Completed,
    Dead,
    Cancelled,
}

impl JobState {
    fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Blocked => "blocked",
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// A command's failure: printed as one line, exit status 1.
#[derive(Debug)]
pub struct CliError(pub String);

impl From<worker_client::Error> for CliError {
    fn from(e: worker_client::Error) -> Self {
        CliError(e.to_string())
    }
}

impl From<tokio_postgres::Error> for CliError {
    fn from(e: tokio_postgres::Error) -> Self {
        CliError(describe(&e))
    }
}

impl From<String> for CliError {
    fn from(s: String) -> Self {
        CliError(s)
    }
}

impl From<&str> for CliError {
    fn from(s: &str) -> Self {
        CliError(s.to_string())
    }
}

/// A server error as `message (SQLSTATE xxxxx)` on one line.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(src) => format!("{e}: {src}"),
            None => e.to_string(),
        },
    }
}

pub type CliResult = Result<(), CliError>;

/// Connects and checks that jq is installed.
pub async fn connect(cli: &Cli) -> Result<tokio_postgres::Client, CliError> {
    let mut config = worker_client::config_from_env(cli.database_url.as_deref())?;
    if config.pg().get_application_name() == Some("jq-worker-client") {
        config.pg_mut().application_name("jqctl");
    }
    let client = worker_client::connect(&config).await?;
    let installed = client
        .query_typed_opt("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jq'", &[])
        .await?;
    if installed.is_none() {
        return Err(worker_client::Error::NotInstalled(config.pg().get_dbname().unwrap_or("?").to_string()).into());
    }
    Ok(client)
}

fn init_logging(cli: &Cli) {
    let level = if cli.quiet {
        tracing::Level::WARN
    } else {
        match cli.verbose {
            0 => tracing::Level::INFO,
            1 => tracing::Level::DEBUG,
            _ => tracing::Level::TRACE,
        }
    };
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// The exit status of a command that succeeded but reports an outcome through it
/// (`jqctl enqueue --wait`); 0 unless that command set it.
pub static EXIT_STATUS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    // Two worker threads: jqctl spends its time waiting on PostgreSQL and child processes.
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jqctl: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&cli)) {
        Ok(()) => ExitCode::from(EXIT_STATUS.load(std::sync::atomic::Ordering::Relaxed)),
        Err(CliError(msg)) => {
            eprintln!("jqctl: error: {}", msg.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: &Cli) -> CliResult {
    match &cli.command {
        Command::Work(args) => work::run(cli, args).await,
        Command::Enqueue(args) => enqueue::run(cli, args).await,
        Command::Queues { format } => admin::queues(cli, *format).await,
        Command::Metrics(args) => metrics::run(cli, args).await,
        Command::Stats { watch, format } => admin::stats(cli, *watch, *format).await,
        Command::Jobs { queue, state, limit, format } => admin::jobs(cli, queue, *state, *limit, *format).await,
        Command::Show { id, format } => admin::show(cli, *id, *format).await,
        Command::Retry { id } => admin::retry(cli, *id).await,
        Command::Cancel { id } => admin::cancel(cli, *id).await,
        Command::ExpireLease { id, lease_token } => admin::expire_lease(cli, *id, *lease_token).await,
        Command::Pause { queue } => admin::pause_resume(cli, queue, true).await,
        Command::Resume { queue } => admin::pause_resume(cli, queue, false).await,
        Command::CreateQueue(args) => admin::create_queue(cli, args).await,
        Command::AlterQueue(args) => admin::alter_queue(cli, args).await,
        Command::Schedule(args) => admin::schedule(cli, args).await,
        Command::Unschedule { name } => admin::unschedule(cli, name).await,
        Command::Schedules { format } => admin::schedules(cli, *format).await,
        Command::Kinds { format } => admin::kinds(cli, *format).await,
        Command::Workers { format } => workers::workers(cli, *format).await,
        Command::AlterKind(args) => admin::alter_kind(cli, args).await,
        #[cfg(feature = "dashboard")]
        Command::Dashboard(args) => dashboard::run(cli, args).await,
    }
}

/// Shared by commands that take an OS command line.
pub type Argv = Vec<OsString>;
