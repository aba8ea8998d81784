//! The `weir` processes the demo drives: one-shot commands (`init`, `status`,
//! `verify`) and the live `weir run`, which no path leaves behind.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::{DemoError, LOG_TAIL_LINES};

/// Runs the real `weir` binary (this executable) in the demo's folder, with its config
/// and the DSNs in the environment.
#[derive(Debug)]
pub(super) struct Weir {
    pub(super) exe: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) source_dsn: String,
    pub(super) target_dsn: String,
}

impl Weir {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.current_dir(&self.dir)
            .args(["--config", "weir.toml"])
            .args(args)
            .env("WEIR_SOURCE_DSN", &self.source_dsn)
            .env("WEIR_TARGET_DSN", &self.target_dsn)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `weir ARGS` to completion; its stdout, or an error with its stderr.
    pub(super) async fn output(&self, args: &[&str]) -> Result<String, DemoError> {
        let output = self.command(args).output().await?;
        if !output.status.success() {
            return Err(DemoError::Step {
                command: args.join(" "),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `weir status --json`.
    pub(super) async fn status(&self) -> Result<Json, DemoError> {
        let text = self.output(&["status", "--json"]).await?;
        serde_json::from_str(&text).map_err(DemoError::Status)
    }

    /// Starts a live `weir run`, its stderr appended to `run.log`.
    pub(super) fn spawn_live(&self) -> Result<LiveRun, DemoError> {
        let log = self.dir.join("run.log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let child = self
            .command(&["run"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        Ok(LiveRun { child, pid, log })
    }
}

#[derive(Debug)]
pub(super) struct LiveRun {
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
}

/// How long a drop waits for a SIGKILLed child to be reaped.
const REAP_TIMEOUT_MS: u64 = 5000;

impl LiveRun {
    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGKILL, then reap (bounded; a SIGKILLed process exits at once).
    pub(super) fn kill(&mut self) {
        let _ = self.child.start_kill();
        let deadline = Instant::now() + Duration::from_millis(REAP_TIMEOUT_MS);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// An error with the tail of its log if it has exited.
    pub(super) fn check_alive(&mut self) -> Result<(), DemoError> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                Err(DemoError::LiveRunExited {
                    status,
                    log_tail: lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"),
                })
            }
        }
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        self.kill();
    }
}
