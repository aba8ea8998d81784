//! Resident memory of a process, from Linux's `/proc/<pid>/status` (0 elsewhere):
//! what `weir plugin test --repeat` reports, and what the tests and benchmarks bound.

/// A process: this one or another by pid.
#[derive(Debug, Clone, Copy)]
pub enum Process {
    This,
    Pid(u32),
}

fn status_field_kib(process: Process, field: &str) -> u64 {
    let path = match process {
        Process::This => "/proc/self/status".to_owned(),
        Process::Pid(pid) => format!("/proc/{pid}/status"),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident set size now, in KiB (`VmRSS`).
pub fn rss_kib(process: Process) -> u64 {
    status_field_kib(process, "VmRSS:")
}

/// Peak resident set size since start or the last [`reset_peak`], in KiB (`VmHWM`).
pub fn peak_rss_kib(process: Process) -> u64 {
    status_field_kib(process, "VmHWM:")
}

/// Resets this process's peak RSS to its current RSS (`clear_refs` 5).
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
