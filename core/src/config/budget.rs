//! The engine's memory budget: one figure a config states, by part, that `weir status`
//! and `weir run` show and `[engine] memory_limit_mb` bounds.

use std::collections::BTreeSet;

use super::Config;
use crate::limits::{
    INTAKE_BATCH_BYTES, PLUGIN_CODE_BYTES, PROCESS_BASE_BYTES, STAGE_MEMORY_BYTES,
    TRANSACTION_CHUNK_BYTES, job_bound_bytes,
};

/// What a run of a config may hold in memory, by part, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemoryBudget {
    /// RocksDB: memtables and block cache.
    pub stage: u64,
    /// One partition job (the largest of the tables'; see `limits::job_bound_bytes`).
    pub job: u64,
    /// `[engine] parallelism`: the jobs at once.
    pub parallelism: u64,
    /// `job` × `parallelism`.
    pub jobs: u64,
    /// Intake: the batch being staged and a large transaction's chunk being read.
    pub intake: u64,
    /// The process: code, runtimes and each distinct plugin's compiled code.
    pub process: u64,
    /// All of it.
    pub total: u64,
}

impl MemoryBudget {
    /// The breakdown as one line: `1.2 GiB = stage 192 MiB + 2 jobs × 483 MiB + …`.
    pub fn explain(&self) -> String {
        format!(
            "{} = stage {} + {} jobs × {} + intake {} + process {}",
            mib(self.total),
            mib(self.stage),
            self.parallelism,
            mib(self.job),
            mib(self.intake),
            mib(self.process)
        )
    }
}

/// Bytes as whole MiB, rounded up.
pub fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(1 << 20))
}

impl Config {
    /// The memory budget of a run of this config (see [`MemoryBudget`]).
    pub fn memory_budget(&self) -> MemoryBudget {
        let job = self
            .tables
            .iter()
            .map(|t| job_bound_bytes(t.plugin.as_ref().map(|p| &p.limits)))
            .max()
            .unwrap_or_else(|| job_bound_bytes(None));
        let plugins: BTreeSet<_> = self
            .tables
            .iter()
            .filter_map(|t| t.plugin.as_ref().map(|p| &p.path))
            .collect();
        let parallelism = self.engine.parallelism as u64;
        let stage = STAGE_MEMORY_BYTES as u64;
        let jobs = job * parallelism;
        // Two batches: one being synced while the next is read (`pipeline::intake`).
        let intake = (2 * INTAKE_BATCH_BYTES + 2 * TRANSACTION_CHUNK_BYTES) as u64;
        let process = PROCESS_BASE_BYTES + PLUGIN_CODE_BYTES * plugins.len() as u64;
        MemoryBudget {
            stage,
            job,
            parallelism,
            jobs,
            intake,
            process,
            total: stage + jobs + intake + process,
        }
    }
}
