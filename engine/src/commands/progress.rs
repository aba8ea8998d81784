//! The progress of a long command (`weir backfill`, `weir verify`), the status line of
//! a live `weir run` on a terminal, and the log writer that prints log lines above
//! whichever of them is shown.

/// The bar or status line on the terminal now, if any: log lines are printed above it.
static SHOWN: std::sync::Mutex<Option<indicatif::ProgressBar>> = std::sync::Mutex::new(None);

fn show(bar: Option<&indicatif::ProgressBar>) {
    if let Ok(mut shown) = SHOWN.lock() {
        *shown = bar.cloned();
    }
}

/// The logs' writer: standard error, with the bar or status line shown (if any) moved
/// out of the way of each line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let shown = SHOWN.lock().ok().and_then(|b| b.clone());
        match shown {
            Some(bar) => bar.suspend(|| std::io::stderr().write(buf)),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The status line of a live `weir run` on a terminal: changes/s in, rows/s out, dirty
/// partitions, the slot's lag, the last write's time (see `Pipeline::live`), redrawn
/// every second. Nothing when standard error is not a terminal.
pub(super) struct StatusLine {
    bar: indicatif::ProgressBar,
    last: (std::time::Instant, weir::pipeline::LiveState),
}

impl StatusLine {
    /// How often the line is redrawn.
    pub(super) const EVERY: std::time::Duration = std::time::Duration::from_secs(1);

    pub(super) fn new() -> Option<StatusLine> {
        use std::io::IsTerminal as _;
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.set_message("starting");
        show(Some(&bar));
        Some(StatusLine {
            bar,
            last: (
                std::time::Instant::now(),
                weir::pipeline::LiveState::default(),
            ),
        })
    }

    pub(super) fn update(&mut self, now: weir::pipeline::LiveState) {
        let seconds = self.last.0.elapsed().as_secs_f64();
        self.bar.set_message(now.line(&self.last.1, seconds));
        self.bar.tick();
        self.last = (std::time::Instant::now(), now);
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        show(None);
        self.bar.finish_and_clear();
    }
}

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
            show(Some(&bar));
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
            show(None);
            bar.finish_and_clear();
        }
    }
}
