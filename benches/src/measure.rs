//! Measuring on this machine: medians and lists of timings, peak RSS, CPU seconds of
//! this process, of its children and of the PostgreSQL cluster, the load average.

use std::time::Duration;

use anyhow::Context as _;
use weir::localpg::LocalPg;

/// Peak RSS of this process since the last reset, in KiB (Linux `VmHWM`).
pub(crate) fn peak_rss_kib() -> u64 {
    weir::procmem::peak_rss_kib(weir::procmem::Process::This)
}

/// Resets the peak RSS to the current RSS.
pub(crate) fn reset_peak_rss() {
    weir::procmem::reset_peak();
}

/// Durations as seconds with two decimals, comma-separated (every run of a figure).
pub(crate) fn seconds_list(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// The 1-minute load average now, from `/proc/loadavg`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// `(ppid, [utime, stime, cutime, cstime])` in seconds from `/proc/<pid>/stat` (in
/// ticks of 1/100 s, Linux's USER_HZ).
fn proc_times(pid: &str) -> Option<(String, [f64; 4])> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name: state (0), ppid (1), ..., utime (11), stime (12), cutime
    // (13), cstime (14).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let seconds = |i: usize| Some(fields.get(i)?.parse::<f64>().ok()? / 100.0);
    Some((
        (*fields.get(1)?).to_owned(),
        [seconds(11)?, seconds(12)?, seconds(13)?, seconds(14)?],
    ))
}

/// CPU seconds this process used so far.
pub(crate) fn own_cpu() -> f64 {
    proc_times("self").map_or(0.0, |(_, t)| t[0] + t[1])
}

/// CPU seconds this process's ended and waited-for children used so far.
pub(crate) fn children_cpu() -> f64 {
    proc_times("self").map_or(0.0, |(_, t)| t[2] + t[3])
}

/// CPU seconds the cluster used so far: the postmaster's, its ended children's, and its
/// running children's (backends, walsenders, workers).
pub(crate) fn cluster_cpu(pg: &LocalPg) -> anyhow::Result<f64> {
    let pid_file = std::fs::read_to_string(pg.data_dir().join("postmaster.pid"))?;
    let pid = pid_file
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let (_, own) = proc_times(&pid).context("read the postmaster's CPU times")?;
    let mut total: f64 = own.iter().sum();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Some((ppid, t)) = proc_times(&name)
            && ppid == pid
        {
            total += t[0] + t[1];
        }
    }
    Ok(total)
}

/// The median of `v`, if any.
pub(crate) fn median_f64(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The median of `v` and all of `v` as text.
pub(crate) fn summary(v: &[Duration]) -> (Duration, String) {
    let all = v
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    (median(v), all)
}
