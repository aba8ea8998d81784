//! The progress of a long command (`weir backfill`, `weir verify`).

/// Progress of a long command: a bar on a terminal, a log line every few seconds
/// otherwise.
pub(super) struct Reporter {
    bar: Option<indicatif::ProgressBar>,
    what: &'static str,
    last: std::sync::Mutex<std::time::Instant>,
    started: std::time::Instant,
}

impl Reporter {
    /// Seconds between progress log lines when stderr is not a terminal.
    const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

    pub(super) fn new(what: &'static str, total: usize) -> Reporter {
        use std::io::IsTerminal as _;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} {bar:30} {pos}/{len} partitions, {per_sec}, ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(what);
            bar
        });
        Reporter {
            bar,
            what,
            last: std::sync::Mutex::new(std::time::Instant::now()),
            started: std::time::Instant::now(),
        }
    }

    pub(super) fn update(&self, p: weir::backfill::Progress) {
        if let Some(bar) = &self.bar {
            bar.set_position(p.done as u64);
            return;
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.elapsed() >= Self::LOG_EVERY || p.done == p.total {
            *last = std::time::Instant::now();
            let secs = self.started.elapsed().as_secs_f64().max(0.001);
            tracing::info!(
                command = self.what,
                done = p.done,
                total = p.total,
                rows = p.rows,
                rows_per_s = (p.rows as f64 / secs) as u64,
                eta_s = ((p.total - p.done) as f64 * secs / p.done.max(1) as f64) as u64,
                "progress"
            );
        }
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
