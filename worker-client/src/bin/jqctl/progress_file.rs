//! `jqctl work`'s progress channel: each job's command gets the path of a fresh, empty file in
//! `JQ_PROGRESS_FILE` and reports progress by appending JSON lines to it
//! (`echo '{"percent": 40}' >> "$JQ_PROGRESS_FILE"`). jqctl reads the file every
//! [`POLL`] and forwards the last complete line that is JSON with the job's next heartbeat
//! (`Job::set_progress`); other lines are ignored with a warning. The file is removed when the
//! job ends.

use std::path::PathBuf;
use std::time::Duration;

use std::io::{Read, Seek};
use worker_client::Job;

/// How often the file is read for new lines.
pub const POLL: Duration = Duration::from_millis(250);

/// The progress file of one job; removed on drop.
pub struct ProgressFile {
    pub path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl ProgressFile {
    /// Creates the (empty) file for job `id`, private to this user.
    pub fn create(id: i64) -> std::io::Result<ProgressFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let nonce: u64 = rand_nonce();
        let path = std::env::temp_dir().join(format!("jqctl-progress-{}-{id}-{nonce:x}", std::process::id()));
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        Ok(ProgressFile { path, offset: 0, partial: Vec::new() })
    }

    /// Reads what was appended since the last call and forwards the last JSON line to `job`.
    /// A small local file read directly (tokio's fs feature is not worth a dependency here).
    pub fn forward(&mut self, job: &Job) {
        let Ok(mut f) = std::fs::File::open(&self.path) else { return };
        if f.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = f.take(1 << 20).read_to_end(&mut buf) else { return };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        let latest = complete
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .filter_map(|l| match serde_json::from_slice::<serde_json::Value>(l) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(job = job.id, "progress line ignored, not JSON: {e}");
                    None
                }
            })
            .next_back();
        if let Some(v) = latest {
            job.set_progress(v);
        }
    }
}

impl Drop for ProgressFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A few random bits for the file name (the path is not a secret; create_new refuses a clash).
fn rand_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}
