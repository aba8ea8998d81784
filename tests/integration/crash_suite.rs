//! The crash suite: `weir` is SIGKILLed at random moments against a real PostgreSQL
//! source while concurrent writers change it, and an exactly-once oracle checks the
//! target afterwards.
//!
//! **The oracle.** Two or three writer tasks change `public.oracle (id, writer, seq, day,
//! payload)`. Each owns its ids (`id = writer × 10⁹ + n`) and stamps a strictly
//! increasing sequence number into every row it inserts or updates. Its operations:
//! inserts, updates (a new `seq`, sometimes a new payload; payloads are now and then
//! large enough for PostgreSQL to store them out of line, so an update that leaves
//! them alone sends an unchanged-TOAST marker), deletes, partition moves (a new
//! `day`), and now and then one large transaction (thousands of rows, more than the
//! config's `transaction_chunk_changes`, so it streams through the stage's pending
//! area). Each writer checks the row count of every statement against its model and
//! updates the model only after its COMMIT succeeded. The expected target is the union
//! of the writers' models; the target is the identity transform into
//! `analytics.oracle`, partitioned by `day`, grain `day`.
//!
//! **The checker** ([`check_target`]) compares the target with the expected rows and
//! counts, per partition (the row's `day`):
//! * MISSING: an expected row with no identical row in the target: absent, or present
//!   only as another version (an older `(writer, seq)`, another day or payload);
//! * EXTRA: a target row left over once every expected row has taken one identical
//!   copy: a duplicate, a row that should have been deleted, a stale version.
//!
//! So a stale version counts once as missing (in the partition where the row belongs)
//! and once as extra (in the partition where the stale copy sits); a row left behind
//! in the partition it moved away from is extra there and missing in its new one.
//!
//! **Seeds.** `WEIR_CRASH_SEED` (otherwise the clock) seeds the writers' operations
//! and the kill delays; it is printed at the start and in every failure. The
//! interleaving with the scheduler is not reproducible, so a seed replays the campaign
//! (the same operations and kill delays), not necessarily the same crash points.
//! `WEIR_CRASH_KILLS=N` runs a longer campaign of the kill loop.
//!
//! **Summary.** Each crash test appends one line to the file named by
//! `WEIR_CRASH_SUITE_LOG` (if set): `kills=N failpoints=0 outages=0 missing=M extra=E
//! test=NAME`; `scripts/test` sums them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use weir::stage::Stage;

use crate::harness::{Rng, TestDb, text};
use crate::postgres_source::{source_fixture, weir_pg};

/// Kills of the main loop by default; `WEIR_CRASH_KILLS` runs a longer campaign.
const KILLS_DEFAULT: usize = 50;
/// Days (partitions) the writers spread their rows over, from 2026-03-01.
const DAYS: i64 = 20;
/// The window of every partition: `[2026-03-01, 2026-03-21)`.
const WINDOW: (&str, &str) = ("2026-03-01", "2026-03-21");
/// A writer's ids are `writer × ID_SPACE + n`.
const ID_SPACE: i64 = 1_000_000_000;
/// The `[[table]]` of every crash test: the identity transform, by day.
const TABLE: &str = "source = \"public.oracle\"\ntarget = \"analytics.oracle\"\nkey = [\"id\"]\npartition_by = \"day\"\ngrain = \"day\"";
/// The engine settings of the crash tests: small group commits, large transactions
/// (more than 1,000 changes) through the pending area, frequent partition writes.
const ENGINE: &str = "[engine]\nflush_interval_ms = 300\nbatch_transactions_max = 16\ntransaction_chunk_changes = 1000\nparallelism = 2";
/// Lines of a weir log shown in a failure message.
const LOG_TAIL_LINES: usize = 25;

// ---- the campaign: seed, kills, failures, summary ------------------------------------------

/// One crash test's campaign: its name and seed, for every message.
struct Campaign {
    name: &'static str,
    seed: u64,
}

impl Campaign {
    fn new(name: &'static str) -> Campaign {
        let seed = std::env::var("WEIR_CRASH_SEED")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        let campaign = Campaign { name, seed };
        eprintln!("crash suite {name}: {}", campaign.repro());
        campaign
    }

    /// The seed and how to run the campaign again.
    fn repro(&self) -> String {
        format!(
            "seed {seed} (reproduce with WEIR_CRASH_SEED={seed})",
            seed = self.seed
        )
    }

    /// A generator of this campaign, one per purpose (`salt`), so that adding draws
    /// for one purpose does not shift the others.
    fn rng(&self, salt: u64) -> Rng {
        Rng::new(self.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Appends the test's summary line to `WEIR_CRASH_SUITE_LOG`, if set.
    fn log_summary(&self, kills: usize, report: &CheckReport) {
        let Ok(path) = std::env::var("WEIR_CRASH_SUITE_LOG") else {
            return;
        };
        let line = format!(
            "kills={kills} failpoints=0 outages=0 missing={} extra={} test={}\n",
            report.missing, report.extra, self.name
        );
        use std::io::Write;
        // One write of a short line to a file opened for appending: lines of tests
        // running at once do not interleave.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .unwrap_or_else(|e| panic!("append to WEIR_CRASH_SUITE_LOG {path}: {e}"));
    }

    /// Copies the test's folder (config, weir logs, stage) where it survives the test,
    /// and returns where.
    fn preserve(&self, db: &TestDb) -> PathBuf {
        let to = std::env::temp_dir().join(format!("weir-crash-{}-{}", self.name, self.seed));
        let _ = std::fs::remove_dir_all(&to);
        if let Err(e) = copy_tree(db.dir.path(), &to) {
            eprintln!("could not keep the test's files in {}: {e}", to.display());
        }
        to
    }

    /// Fails the test with `message`, the seed, the tails of the last weir logs, and
    /// where the test's files were kept.
    fn fail(&self, db: &TestDb, message: &str) -> ! {
        let kept = self.preserve(db);
        panic!(
            "{}: {message}\n{}\nlast weir logs:\n{}\nthe test's folder (config, weir logs, stage) is kept in {}",
            self.name,
            self.repro(),
            last_logs(db.dir.path(), 3),
            kept.display()
        );
    }
}

/// Kills wanted for the main loop.
fn kills_wanted() -> usize {
    std::env::var("WEIR_CRASH_KILLS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(KILLS_DEFAULT)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The last `n` weir logs (`*.log`, newest first) of a test's folder, each cut to its
/// last lines.
fn last_logs(dir: &Path, n: usize) -> String {
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    let mut out = String::new();
    for (_, path) in logs.iter().rev().take(n) {
        let body = std::fs::read_to_string(path).unwrap_or_default();
        let _ = writeln!(
            out,
            "--- {} (last {LOG_TAIL_LINES} lines)\n{}",
            path.display(),
            tail(&body, LOG_TAIL_LINES)
        );
    }
    if out.is_empty() {
        out.push_str("(none)\n");
    }
    out
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// When a kill lands: now and then within 100 ms of the run's start (the kill lands in
/// start-up: the stage opening, the slot check, the snapshot's resume, the replication
/// connection); otherwise up to 1.9 s after the run opened its source ([`wait_open`]:
/// the kill may land while the server decodes the WAL the last runs left unconfirmed,
/// or during a snapshot), or up to 1.9 s after the run staged its first batch
/// ([`wait_staged`]: the kill lands while the feed is staged, however long the server
/// takes to decode its way back to the stage's position on a slow machine).
#[derive(Clone, Copy)]
enum KillAt {
    Startup(Duration),
    Open(Duration),
    Staged(Duration),
}

fn kill_delay(rng: &mut Rng) -> KillAt {
    let delay = Duration::from_millis(rng.below(1900));
    match rng.below(5) {
        0 => KillAt::Startup(Duration::from_millis(rng.below(100))),
        1 | 2 => KillAt::Open(delay),
        _ => KillAt::Staged(delay),
    }
}

/// Whether a weir log shows a batch staged with a source position.
fn staged_a_batch(log: &str) -> bool {
    log.lines()
        .any(|line| line.contains(" staged ") && line.contains(" position="))
}

/// What the kill loop's kills hit, for its report: per kind of kill, how many, how many
/// advanced the stage position, and (for kills after staging) how long runs took from
/// opening their source to staging a batch.
#[derive(Default)]
struct KillTally {
    startup: (usize, usize),
    open: (usize, usize),
    staged: (usize, usize),
    open_to_staged_ms: Vec<u128>,
}

impl KillTally {
    fn count(&mut self, at: KillAt, advanced: bool) {
        let slot = match at {
            KillAt::Startup(_) => &mut self.startup,
            KillAt::Open(_) => &mut self.open,
            KillAt::Staged(_) => &mut self.staged,
        };
        slot.0 += 1;
        slot.1 += usize::from(advanced);
    }

    fn render(&self) -> String {
        let mut waits = self.open_to_staged_ms.clone();
        waits.sort_unstable();
        let at = |q: usize| waits.get((waits.len() * q / 100).min(waits.len().saturating_sub(1)));
        format!(
            "kills (advanced/all): in start-up {}/{}, after open {}/{}, after a staged batch {}/{}; open to first staged batch: median {:?} ms, max {:?} ms",
            self.startup.1,
            self.startup.0,
            self.open.1,
            self.open.0,
            self.staged.1,
            self.staged.0,
            at(50),
            waits.last()
        )
    }
}

/// The lines a run logs once its source is open: a first load, a watermark snapshot,
/// or the stream.
const SOURCE_OPEN: [&str; 3] = [
    "first load starts from an exported snapshot",
    "initial snapshot starts",
    "streaming from the replication slot",
];

/// Waits until the run in `child` logs (to `log`) that its source is open, or exits;
/// fails the test if it does neither within a minute.
async fn wait_open(campaign: &Campaign, db: &TestDb, child: &mut Child, log: &str) {
    let open = |body: &str| SOURCE_OPEN.iter().any(|line| body.contains(line));
    wait_for_log(campaign, db, child, log, open, "open its source").await;
}

/// Waits until the run in `child` logs a batch staged with a position, or exits; fails
/// the test if it does neither within a minute of opening its source (the writers
/// commit all the time: a run that stages nothing in a minute is stuck).
async fn wait_staged(campaign: &Campaign, db: &TestDb, child: &mut Child, log: &str) {
    let what = "stage a batch after opening its source";
    wait_for_log(campaign, db, child, log, staged_a_batch, what).await;
}

/// Waits until `seen` holds of the run's log, or the run exits; after a minute, kills
/// it and fails the test with the log's tail, saying the run did not do `what`.
async fn wait_for_log(
    campaign: &Campaign,
    db: &TestDb,
    child: &mut Child,
    log: &str,
    seen: impl Fn(&str) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = std::fs::read_to_string(db.path(log)).unwrap_or_default();
        if seen(&body) || child.try_wait().expect("poll weir run").is_some() {
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            campaign.fail(
                db,
                &format!("weir run did not {what} within 60 s:\n{}", tail(&body, 30)),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- the oracle: rows, writers -------------------------------------------------------------

/// One row as its writer knows it; `day` as PostgreSQL prints a date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OracleRow {
    pub writer: i32,
    pub seq: i64,
    pub day: String,
    pub payload: Option<String>,
}

/// Rows by id.
pub type Rows = BTreeMap<i64, OracleRow>;

/// Day `index` (from 2026-03-01) as PostgreSQL prints it.
fn day(index: i64) -> String {
    (chrono::NaiveDate::from_ymd_opt(2026, 3, 1).expect("a valid date")
        + chrono::Duration::days(index))
    .format("%Y-%m-%d")
    .to_string()
}

/// The source table, with `REPLICA IDENTITY identity`, and `prepopulated` rows per
/// writer (`1..=writers`), as [`Writer::new`] models them.
fn oracle_ddl(identity: &str, writers: i32, prepopulated: i64) -> String {
    let mut sql = format!(
        "CREATE TABLE oracle (id bigint PRIMARY KEY, writer int NOT NULL, seq bigint NOT NULL, day date NOT NULL, payload text);
         ALTER TABLE oracle REPLICA IDENTITY {identity};"
    );
    if prepopulated > 0 {
        for w in 1..=writers {
            let _ = write!(
                sql,
                "INSERT INTO oracle SELECT {w}::bigint * {ID_SPACE} + g, {w}, g, DATE '2026-03-01' + (g % {DAYS})::int, 'init-' || g \
                 FROM generate_series(1, {prepopulated}) g;"
            );
        }
    }
    sql
}

/// How a writer behaves.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// One transaction in this many is a large one (0: never).
    large_one_in: u64,
    /// Rows a large transaction inserts: at least, at most.
    large_rows: (u64, u64),
    /// A pause of up to this many milliseconds between transactions.
    pause_ms: u64,
}

/// What a writer did.
#[derive(Debug, Default, Clone, Copy)]
struct WriterStats {
    transactions: u64,
    large: u64,
    inserts: u64,
    updates: u64,
    deletes: u64,
    moves: u64,
    toasted: u64,
}

impl WriterStats {
    fn add(&mut self, o: &WriterStats) {
        self.transactions += o.transactions;
        self.large += o.large;
        self.inserts += o.inserts;
        self.updates += o.updates;
        self.deletes += o.deletes;
        self.moves += o.moves;
        self.toasted += o.toasted;
    }
}

/// The changes of the transaction being built: id → new row (`None`: deleted).
type Overlay = BTreeMap<i64, Option<OracleRow>>;

/// A statement of a writer's transaction and the rows it must affect.
type Statement = (String, u64);

/// One writer: its ids, its sequence, and its model of its committed rows.
struct Writer {
    id: i32,
    rng: Rng,
    /// The last sequence number stamped.
    seq: i64,
    /// The last `n` of an id inserted (`id = writer × ID_SPACE + n`).
    last_n: i64,
    /// The writer's committed rows, changed only after a COMMIT succeeded.
    model: Rows,
    shape: Shape,
    stats: WriterStats,
}

impl Writer {
    /// A writer whose rows are the `prepopulated` rows of [`oracle_ddl`].
    fn new(id: i32, rng: Rng, prepopulated: i64, shape: Shape) -> Writer {
        let base = i64::from(id) * ID_SPACE;
        let model = (1..=prepopulated)
            .map(|g| {
                (
                    base + g,
                    OracleRow {
                        writer: id,
                        seq: g,
                        day: day(g % DAYS),
                        payload: Some(format!("init-{g}")),
                    },
                )
            })
            .collect();
        Writer {
            id,
            rng,
            seq: prepopulated,
            last_n: prepopulated,
            model,
            shape,
            stats: WriterStats::default(),
        }
    }

    fn base(&self) -> i64 {
        i64::from(self.id) * ID_SPACE
    }

    fn next_seq(&mut self) -> i64 {
        self.seq += 1;
        self.seq
    }

    /// The row as the transaction being built sees it.
    fn current<'a>(&'a self, overlay: &'a Overlay, id: i64) -> Option<&'a OracleRow> {
        match overlay.get(&id) {
            Some(row) => row.as_ref(),
            None => self.model.get(&id),
        }
    }

    /// A payload: mostly short, sometimes NULL, sometimes ~3 KB of random letters that
    /// do not compress, so PostgreSQL stores it out of line (TOAST).
    fn payload(&mut self) -> Option<String> {
        match self.rng.below(20) {
            0 => None,
            1 | 2 => {
                self.stats.toasted += 1;
                const LETTERS: &[u8] =
                    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
                Some(
                    (0..3000)
                        .map(|_| char::from(LETTERS[self.rng.below(LETTERS.len() as u64) as usize]))
                        .collect(),
                )
            }
            _ => Some(format!("w{}-{}", self.id, self.rng.below(1_000_000))),
        }
    }

    /// An existing row: now and then one this transaction inserted or changed,
    /// otherwise a committed one.
    fn pick_existing(&mut self, overlay: &Overlay) -> Option<i64> {
        if !overlay.is_empty() && self.rng.below(4) == 0 {
            let live: Vec<i64> = overlay
                .iter()
                .filter(|(_, r)| r.is_some())
                .map(|(id, _)| *id)
                .collect();
            if !live.is_empty() {
                return Some(live[self.rng.below(live.len() as u64) as usize]);
            }
        }
        let probe = self.base() + 1 + self.rng.below(self.last_n.max(1) as u64) as i64;
        let id = self
            .model
            .range(probe..)
            .next()
            .or_else(|| self.model.iter().next())
            .map(|(id, _)| *id)?;
        self.current(overlay, id).is_some().then_some(id)
    }

    /// One small change: insert, update, delete or partition move.
    fn small_change(&mut self, overlay: &mut Overlay, statements: &mut Vec<Statement>) {
        let roll = self.rng.below(100);
        let existing = if roll < 30 {
            None
        } else {
            self.pick_existing(overlay)
        };
        let Some(id) = existing else {
            self.last_n += 1;
            let id = self.base() + self.last_n;
            let row = OracleRow {
                writer: self.id,
                seq: self.next_seq(),
                day: day(self.rng.below(DAYS as u64) as i64),
                payload: self.payload(),
            };
            statements.push((
                format!(
                    "INSERT INTO oracle (id, writer, seq, day, payload) VALUES ({id}, {}, {}, '{}', {})",
                    row.writer,
                    row.seq,
                    row.day,
                    literal(&row.payload)
                ),
                1,
            ));
            overlay.insert(id, Some(row));
            self.stats.inserts += 1;
            return;
        };
        let mut row = self
            .current(overlay, id)
            .cloned()
            .expect("pick_existing returns a live row");
        match roll {
            30..=59 => {
                // An update with a new seq; half the time the payload stays (an
                // out-of-line one then arrives as an unchanged-TOAST marker).
                row.seq = self.next_seq();
                let set_payload = if self.rng.below(2) == 0 {
                    row.payload = self.payload();
                    format!(", payload = {}", literal(&row.payload))
                } else {
                    String::new()
                };
                statements.push((
                    format!(
                        "UPDATE oracle SET seq = {}{set_payload} WHERE id = {id}",
                        row.seq
                    ),
                    1,
                ));
                overlay.insert(id, Some(row));
                self.stats.updates += 1;
            }
            60..=79 => {
                statements.push((format!("DELETE FROM oracle WHERE id = {id}"), 1));
                overlay.insert(id, None);
                self.stats.deletes += 1;
            }
            _ => {
                // A partition move: another day, a new seq, the payload unchanged.
                let mut to = day(self.rng.below(DAYS as u64) as i64);
                if to == row.day {
                    to = day(
                        (self.rng.below(DAYS as u64 - 1) as i64 + 1 + day_index(&row.day)) % DAYS,
                    );
                }
                row.day = to;
                row.seq = self.next_seq();
                statements.push((
                    format!(
                        "UPDATE oracle SET seq = {}, day = '{}' WHERE id = {id}",
                        row.seq, row.day
                    ),
                    1,
                ));
                overlay.insert(id, Some(row));
                self.stats.moves += 1;
            }
        }
    }

    /// A large transaction: thousands of inserted rows, then a range of committed rows
    /// updated (moving partitions) or deleted, then a few small changes.
    fn large_changes(&mut self, overlay: &mut Overlay, statements: &mut Vec<Statement>) {
        self.stats.large += 1;
        let (least, most) = self.shape.large_rows;
        let n = least + self.rng.below(most - least + 1);
        let first = self.base() + self.last_n;
        self.last_n += n as i64;
        let s0 = self.seq;
        self.seq += n as i64;
        let k = self.rng.below(DAYS as u64);
        statements.push((
            format!(
                "INSERT INTO oracle SELECT {first} + g, {w}, {s0} + g, DATE '2026-03-01' + ((g * 7 + {k}) % {DAYS})::int, 'bulk-' || ({s0} + g) \
                 FROM generate_series(1, {n}) g",
                w = self.id
            ),
            n,
        ));
        for g in 1..=n as i64 {
            overlay.insert(
                first + g,
                Some(OracleRow {
                    writer: self.id,
                    seq: s0 + g,
                    day: day((g * 7 + k as i64) % DAYS),
                    payload: Some(format!("bulk-{}", s0 + g)),
                }),
            );
        }
        self.stats.inserts += n;
        if let Some(lo) = self.pick_existing(&Overlay::new()) {
            let span = 500 + self.rng.below(2500) as i64;
            let hi = lo + span;
            let ids: Vec<i64> = self
                .model
                .range(lo..=hi)
                .map(|(id, _)| *id)
                .chain(overlay.range(lo..=hi).map(|(id, _)| *id))
                .collect::<std::collections::BTreeSet<i64>>()
                .into_iter()
                .filter(|id| self.current(overlay, *id).is_some())
                .collect();
            if self.rng.below(3) == 0 {
                statements.push((
                    format!("DELETE FROM oracle WHERE id BETWEEN {lo} AND {hi}"),
                    ids.len() as u64,
                ));
                for id in ids {
                    overlay.insert(id, None);
                    self.stats.deletes += 1;
                }
            } else {
                let s1 = self.seq + 1;
                self.seq += span + 1;
                let k2 = self.rng.below(DAYS as u64) as i64;
                statements.push((
                    format!(
                        "UPDATE oracle SET seq = {s1} + (id - {lo}), day = DATE '2026-03-01' + ((id + {k2}) % {DAYS})::int \
                         WHERE id BETWEEN {lo} AND {hi}"
                    ),
                    ids.len() as u64,
                ));
                for id in ids {
                    let mut row = self
                        .current(overlay, id)
                        .cloned()
                        .expect("a live row of the range");
                    row.seq = s1 + (id - lo);
                    row.day = day((id + k2) % DAYS);
                    overlay.insert(id, Some(row));
                    self.stats.moves += 1;
                }
            }
        }
        for _ in 0..1 + self.rng.below(3) {
            self.small_change(overlay, statements);
        }
    }
}

/// The index of a day printed by [`day`].
fn day_index(text: &str) -> i64 {
    let d = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("a day of the oracle");
    (d - chrono::NaiveDate::from_ymd_opt(2026, 3, 1).expect("a valid date")).num_days()
}

/// An SQL literal of a payload (letters, digits and `-` only).
fn literal(payload: &Option<String>) -> String {
    payload
        .as_ref()
        .map_or_else(|| "NULL".to_owned(), |p| format!("'{p}'"))
}

/// Runs one writer until `stop`: transactions of one to five small changes, now and
/// then a large one. Every statement's row count is checked against the model, and the
/// model follows only a successful COMMIT.
async fn run_writer(mut writer: Writer, dsn: String, stop: Arc<AtomicBool>) -> Writer {
    let (mut client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a writer connects to the source");
    tokio::spawn(connection);
    while !stop.load(Ordering::Relaxed) {
        let mut overlay = Overlay::new();
        let mut statements = Vec::new();
        if writer.shape.large_one_in > 0 && writer.rng.below(writer.shape.large_one_in) == 0 {
            writer.large_changes(&mut overlay, &mut statements);
        } else {
            for _ in 0..1 + writer.rng.below(5) {
                writer.small_change(&mut overlay, &mut statements);
            }
        }
        let txn = client
            .transaction()
            .await
            .expect("a writer begins a transaction");
        for (sql, rows) in &statements {
            let affected = txn
                .execute(sql.as_str(), &[])
                .await
                .unwrap_or_else(|e| panic!("writer {}: {e}: {sql:.300}", writer.id));
            assert_eq!(
                affected, *rows,
                "writer {}: rows affected by {sql:.300}: the model and the source disagree",
                writer.id
            );
        }
        txn.commit().await.expect("a writer commits");
        // The COMMIT succeeded: only now does the model follow.
        for (id, row) in overlay {
            match row {
                Some(row) => writer.model.insert(id, row),
                None => writer.model.remove(&id),
            };
        }
        writer.stats.transactions += 1;
        let pause = writer.rng.below(writer.shape.pause_ms + 1);
        if pause > 0 {
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
    writer
}

/// Writers running against the source.
struct Writers {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Writer>>,
}

impl Writers {
    /// Starts writers `1..=count`, each with `prepopulated` rows already in the source.
    fn start(
        campaign: &Campaign,
        dsn: &str,
        count: i32,
        prepopulated: i64,
        shape: Shape,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (1..=count)
            .map(|w| {
                let writer = Writer::new(w, campaign.rng(100 + w as u64), prepopulated, shape);
                tokio::spawn(run_writer(writer, dsn.to_owned(), Arc::clone(&stop)))
            })
            .collect();
        Writers { stop, handles }
    }

    /// Whether a writer stopped on its own (it failed: its panic is reported by `stop`).
    fn failed(&self) -> bool {
        self.handles.iter().any(|h| h.is_finished())
    }

    /// Stops the writers; the expected rows are the union of their models. `Err`: a
    /// writer failed, and why.
    async fn stop(self) -> Result<(Rows, WriterStats), String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut rows = Rows::new();
        let mut stats = WriterStats::default();
        let mut failures = Vec::new();
        for handle in self.handles {
            let writer = match handle.await {
                Ok(writer) => writer,
                Err(e) if e.is_panic() => {
                    let panic = e.into_panic();
                    failures.push(
                        panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_else(|| "a writer panicked".to_owned()),
                    );
                    continue;
                }
                Err(e) => {
                    failures.push(e.to_string());
                    continue;
                }
            };
            stats.add(&writer.stats);
            let before = rows.len();
            let len = writer.model.len();
            rows.extend(writer.model);
            assert_eq!(rows.len(), before + len, "writers' ids are disjoint");
        }
        if failures.is_empty() {
            Ok((rows, stats))
        } else {
            Err(failures.join("; "))
        }
    }

    /// Stops the writers, failing the test if one failed.
    async fn finish(self, campaign: &Campaign, db: &TestDb) -> (Rows, WriterStats) {
        match self.stop().await {
            Ok(done) => done,
            Err(why) => campaign.fail(db, &format!("a writer failed: {why}")),
        }
    }
}

// ---- the checker -----------------------------------------------------------------------------

/// What the checker found.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub missing: usize,
    pub extra: usize,
    /// Partition → (missing, extra), for partitions with a discrepancy.
    pub partitions: BTreeMap<String, (usize, usize)>,
    /// The first discrepancies, one line each.
    pub first: Vec<String>,
    pub expected_rows: usize,
    pub target_rows: usize,
}

impl CheckReport {
    pub fn is_exact(&self) -> bool {
        self.missing == 0 && self.extra == 0
    }

    fn note(&mut self, partition: &str, missing: bool, line: String) {
        let entry = self.partitions.entry(partition.to_owned()).or_default();
        if missing {
            self.missing += 1;
            entry.0 += 1;
        } else {
            self.extra += 1;
            entry.1 += 1;
        }
        if self.first.len() < 20 {
            self.first.push(line);
        }
    }

    /// A readable report: totals, counts per partition, the first discrepancies.
    pub fn render(&self) -> String {
        let mut out = format!(
            "missing={} extra={} ({} rows expected, {} in the target)\n",
            self.missing, self.extra, self.expected_rows, self.target_rows
        );
        for (partition, (missing, extra)) in &self.partitions {
            let _ = writeln!(
                out,
                "  partition {partition}: {missing} missing, {extra} extra"
            );
        }
        if !self.first.is_empty() {
            let _ = writeln!(out, "first {} discrepancies:", self.first.len());
            for line in &self.first {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }
}

fn describe(row: &OracleRow) -> String {
    let payload = match &row.payload {
        None => "NULL".to_owned(),
        Some(p) if p.len() > 24 => format!("{}… ({} chars)", &p[..20], p.len()),
        Some(p) => p.clone(),
    };
    format!(
        "(writer {}, seq {}, day {}, payload {payload})",
        row.writer, row.seq, row.day
    )
}

/// Compares `table` with the expected rows; see the module docs for the classes.
pub async fn check_target(client: &Client, table: &str, expected: &Rows) -> CheckReport {
    let rows = client
        .query(
            &format!("SELECT id, writer, seq, day::text, payload FROM {table}"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("read the target {table}: {e}"));
    let mut actual: BTreeMap<i64, Vec<OracleRow>> = BTreeMap::new();
    for r in &rows {
        actual.entry(r.get(0)).or_default().push(OracleRow {
            writer: r.get(1),
            seq: r.get(2),
            day: r.get(3),
            payload: r.get(4),
        });
    }
    let mut report = CheckReport {
        expected_rows: expected.len(),
        target_rows: rows.len(),
        ..CheckReport::default()
    };
    // Each expected row takes one identical copy; what is left over is extra.
    for (id, want) in expected {
        let copies = actual.entry(*id).or_default();
        if let Some(i) = copies.iter().position(|got| got == want) {
            copies.swap_remove(i);
            continue;
        }
        let why = match copies.first() {
            None => "absent".to_owned(),
            Some(other) if other.seq < want.seq => {
                format!("only an older version is there: {}", describe(other))
            }
            Some(other) => format!("only another version is there: {}", describe(other)),
        };
        report.note(
            &want.day,
            true,
            format!(
                "MISSING id {id} in partition {}: want {}; {why}",
                want.day,
                describe(want)
            ),
        );
    }
    for (id, left) in &actual {
        for got in left {
            let why = match expected.get(id) {
                None => "no such row is expected (deleted, or never committed)".to_owned(),
                Some(want) if want == got => "a duplicate".to_owned(),
                Some(want) if got.seq < want.seq => format!(
                    "a stale version (the row is at seq {} in partition {})",
                    want.seq, want.day
                ),
                Some(want) => format!("differs from the expected {}", describe(want)),
            };
            report.note(
                &got.day,
                false,
                format!(
                    "EXTRA id {id} in partition {}: {}; {why}",
                    got.day,
                    describe(got)
                ),
            );
        }
    }
    report
}

// ---- running weir ----------------------------------------------------------------------------

/// Starts `weir ARGS` against the test's source, its log in the test's folder.
fn spawn_weir(db: &TestDb, source_dsn: &str, args: &[&str], log: &str) -> Child {
    db.weir_command(args)
        .env("WEIR_SOURCE_DSN", source_dsn)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(db.path(log)).expect("create a weir log"))
        .spawn()
        .expect("spawn weir")
}

/// The server still holds the slot for the walsender of a killed run (SQLSTATE 55006):
/// the new run exits at once; a supervisor (or this test) starts it again.
fn slot_busy(log: &str) -> bool {
    log.contains("PostgreSQL error 55006")
}

/// Waits (bounded) until no walsender holds the slot.
async fn wait_slot_free(source: &Client, slot: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let active: Option<bool> = source
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .ok()
            .flatten()
            .map(|r| r.get(0));
        // Cleanup after the checks: a query that fails leaves the slot as it is.
        if active != Some(true) || Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `weir run --once` until it succeeds (a run refused because the slot is still held
/// is tried again); fails the test on any other failure.
async fn drain(
    campaign: &Campaign,
    db: &TestDb,
    source_dsn: &str,
    source: &Client,
    slot: &str,
) -> Output {
    for _ in 0..10 {
        wait_slot_free(source, slot).await;
        let out = weir_pg(db, source_dsn, &["run", "--once"]);
        let stderr = text(&out.stderr);
        let _ = std::fs::write(db.path("drain.log"), &stderr);
        if out.status.success() {
            return out;
        }
        if !slot_busy(&stderr) {
            campaign.fail(db, &format!("weir run --once failed: {}", out.status));
        }
    }
    campaign.fail(db, "weir run --once: the slot stayed busy")
}

/// The stage's position (read-only open, while no weir runs).
fn stage_position(db: &TestDb) -> Option<u64> {
    let stage = Stage::open_read_only(&db.path("stage")).expect("the stage opens after a kill");
    stage
        .checkpoint()
        .expect("read the stage position")
        .map(|c| c.position)
}

/// Drops the test's slot (best effort), so the cluster's slots and WAL are not held.
async fn drop_slot(source: &Client, slot: &str) {
    wait_slot_free(source, slot).await;
    let _ = source
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await;
}

/// The source, target client, and config of a crash test.
async fn setup(db: &TestDb, slot: &str, ddl: &str, source_extra: &str) -> (String, Client, Client) {
    let (source_dsn, source) =
        source_fixture(db, slot, ddl, &format!("{source_extra}\n{ENGINE}"), TABLE).await;
    (source_dsn, source, db.client().await)
}

/// [`setup`] with the source on the harness's TLS cluster: Weir reads it over TLS
/// (verify-full, SCRAM with channel binding, a role refused without TLS); the writers
/// and the checks connect in clear as `postgres`. Returns Weir's source DSN, the
/// writers' DSN, the source client and the target client.
async fn setup_tls(
    db: &TestDb,
    slot: &str,
    ddl: &str,
    source_extra: &str,
) -> (String, String, Client, Client) {
    let (weir_dsn, plain_dsn, source) = crate::tls::tls_source(slot, ddl).await;
    std::fs::write(
        db.config_path(),
        format!(
            "[source]\nkind = \"postgres\"\ndsn_env = \"WEIR_SOURCE_DSN\"\nslot = \"{slot}\"\npublication = \"{slot}\"\n{source_extra}\n{ENGINE}\n\
             [stage]\npath = \"stage\"\n[target]\nkind = \"postgres\"\ndsn_env = \"WEIR_TARGET_DSN\"\n[[table]]\n{TABLE}\n"
        ),
    )
    .expect("config");
    (weir_dsn, plain_dsn, source, db.client().await)
}

/// Kills after which the stage's position had moved, and the checks of invariants 1
/// and 2 across kills.
#[derive(Debug, Default)]
struct PositionWatch {
    last: Option<u64>,
    advanced: usize,
}

impl PositionWatch {
    /// After a kill: the stage position never moves back. (The slot's confirmed
    /// position may pass it: a caught-up stream confirms the server's sent position,
    /// past WAL that holds nothing for Weir. That nothing acknowledged is lost is what
    /// the final check shows, and `faults.rs` shows it catches a build that
    /// acknowledges before staging.)
    async fn check(&mut self, campaign: &Campaign, db: &TestDb) {
        let position = stage_position(db);
        if position < self.last {
            campaign.fail(
                db,
                &format!(
                    "the stage position moved back from {:?} to {position:?}",
                    self.last
                ),
            );
        }
        if position > self.last {
            self.advanced += 1;
        }
        self.last = position;
    }
}

/// Checks the target against the expected rows, appends the summary line, and fails
/// the test on any discrepancy.
async fn final_check(
    campaign: &Campaign,
    db: &TestDb,
    target: &Client,
    expected: &Rows,
    kills: usize,
) -> CheckReport {
    let report = check_target(target, "analytics.oracle", expected).await;
    campaign.log_summary(kills, &report);
    if !report.is_exact() {
        campaign.fail(
            db,
            &format!(
                "the target is not exactly the writers' committed rows after {kills} kills:\n{}",
                report.render()
            ),
        );
    }
    report
}

// ---- the tests ---------------------------------------------------------------------------------

/// `weir run` (live) SIGKILLed at random moments, at least 50 times
/// (`WEIR_CRASH_KILLS`), while three writers change the source; then one drain, and the
/// target is exactly the writers' committed rows.
#[tokio::test(flavor = "multi_thread")]
async fn crash_suite_kill_loop_under_concurrent_writers_ends_exact() {
    let campaign = Campaign::new("kill_loop");
    let kills_wanted = kills_wanted();
    let db = TestDb::new("crash_loop_target").await;
    let slot = "crash_loop";
    let (source_dsn, source, target) = setup(
        &db,
        slot,
        &oracle_ddl("DEFAULT", 3, 0),
        "snapshot_chunk_rows = 1000",
    )
    .await;
    let shape = Shape {
        large_one_in: 600,
        large_rows: (1200, 3000),
        pause_ms: 30,
    };
    // The writers start before `weir init`: rows committed before the slot exists
    // come through the initial snapshot, the rest through the stream.
    let early = std::env::var("CRASH_EXPERIMENT_AFTER_INIT").is_err();
    let mut pre = early.then(|| Writers::start(&campaign, &source_dsn, 3, 0, shape));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    if !out.status.success() {
        campaign.fail(&db, &format!("weir init failed: {}", text(&out.stderr)));
    }
    let writers = pre
        .take()
        .unwrap_or_else(|| Writers::start(&campaign, &source_dsn, 3, 0, shape));
    let mut rng = campaign.rng(1);
    let started = Instant::now();
    let (mut kills, mut runs, mut refused) = (0usize, 0usize, 0usize);
    let mut watch = PositionWatch::default();
    let mut tally = KillTally::default();
    while kills < kills_wanted {
        runs += 1;
        // Keep the last few logs only: a long campaign would fill the disk.
        let _ = std::fs::remove_file(db.path(&format!("run-{}.log", runs.saturating_sub(5))));
        let log = format!("run-{runs}.log");
        let mut child = spawn_weir(&db, &source_dsn, &["run"], &log);
        let at = kill_delay(&mut rng);
        match at {
            KillAt::Startup(delay) => tokio::time::sleep(delay).await,
            KillAt::Open(delay) => {
                wait_open(&campaign, &db, &mut child, &log).await;
                tokio::time::sleep(delay).await;
            }
            KillAt::Staged(delay) => {
                wait_open(&campaign, &db, &mut child, &log).await;
                let open = Instant::now();
                wait_staged(&campaign, &db, &mut child, &log).await;
                tally.open_to_staged_ms.push(open.elapsed().as_millis());
                tokio::time::sleep(delay).await;
            }
        }
        if let Some(status) = child.try_wait().expect("poll weir run") {
            let body = std::fs::read_to_string(db.path(&log)).unwrap_or_default();
            if slot_busy(&body) && refused < kills_wanted {
                refused += 1;
                continue;
            }
            campaign.fail(
                &db,
                &format!("weir run exited by itself ({status}) in run {runs}"),
            );
        }
        child.kill().expect("SIGKILL weir run");
        child.wait().expect("reap weir run");
        kills += 1;
        let before = watch.advanced;
        watch.check(&campaign, &db).await;
        tally.count(at, watch.advanced > before);
        if writers.failed() {
            writers.finish(&campaign, &db).await;
            campaign.fail(&db, "a writer stopped by itself");
        }
    }
    let (expected, stats) = writers.finish(&campaign, &db).await;
    eprintln!(
        "crash suite kill_loop: {kills} kills in {runs} runs ({refused} refused: slot still held) over {:.0?}; the position advanced across {} kills; {}; writers: {stats:?}",
        started.elapsed(),
        watch.advanced,
        tally.render()
    );
    let out = drain(&campaign, &db, &source_dsn, &source, slot).await;
    eprintln!("crash suite kill_loop: drain: {}", text(&out.stdout).trim());
    let report = final_check(&campaign, &db, &target, &expected, kills).await;
    assert!(
        watch.advanced > kills / 4,
        "kills should land while the feed is being staged ({} of {kills}; {}); {}",
        watch.advanced,
        tally.render(),
        campaign.repro()
    );
    assert!(
        stats.large >= 1 && stats.toasted >= 1 && stats.moves >= 1 && stats.deletes >= 1,
        "the workload had large transactions, out-of-line payloads, moves and deletes: {stats:?}; {}",
        campaign.repro()
    );
    assert!(report.expected_rows > 0);
    drop_slot(&source, slot).await;
}

/// Live intake and writes overlap (the writer runs beside intake). Every partition
/// write is slowed inside its transaction (`target-after-copy=sleep(150)`), so most
/// kills land while a write is open and intake goes on staging; the logs must show
/// batches staged while a write round was open, and the target ends exact.
#[tokio::test(flavor = "multi_thread")]
async fn crash_suite_kills_while_intake_and_writes_overlap_end_exact() {
    let campaign = Campaign::new("overlap");
    let kills_wanted = (kills_wanted() / 5).max(6);
    let db = TestDb::new("crash_overlap_target").await;
    let slot = "crash_overlap";
    let (source_dsn, source, target) = setup(
        &db,
        slot,
        &oracle_ddl("DEFAULT", 3, 0),
        "snapshot_chunk_rows = 1000",
    )
    .await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    if !out.status.success() {
        campaign.fail(&db, &format!("weir init failed: {}", text(&out.stderr)));
    }
    let shape = Shape {
        large_one_in: 0,
        large_rows: (0, 0),
        pause_ms: 20,
    };
    let writers = Writers::start(&campaign, &source_dsn, 3, 0, shape);
    let mut rng = campaign.rng(5);
    let (mut kills, mut runs, mut refused, mut overlaps) = (0usize, 0usize, 0usize, 0usize);
    let mut watch = PositionWatch::default();
    while kills < kills_wanted {
        runs += 1;
        let log = format!("overlap-run-{runs}.log");
        let mut child = db
            .weir_command(&["run"])
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .env("FAILPOINTS", "target-after-copy=sleep(150)")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(db.path(&log)).expect("create a weir log"))
            .spawn()
            .expect("spawn weir");
        // The run's life is counted from when it streams: on a loaded machine its start
        // alone can outlast the wait, and then no write round would ever open.
        let up = Instant::now();
        while up.elapsed() < Duration::from_secs(60)
            && !std::fs::read_to_string(db.path(&log))
                .unwrap_or_default()
                .contains("streaming from the replication slot")
            && child.try_wait().expect("poll weir run").is_none()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500 + rng.below(2000))).await;
        if let Some(status) = child.try_wait().expect("poll weir run") {
            let body = std::fs::read_to_string(db.path(&log)).unwrap_or_default();
            if slot_busy(&body) && refused < kills_wanted {
                refused += 1;
                continue;
            }
            campaign.fail(
                &db,
                &format!("weir run exited by itself ({status}) in run {runs}"),
            );
        }
        child.kill().expect("SIGKILL weir run");
        child.wait().expect("reap weir run");
        kills += 1;
        overlaps +=
            staged_during_writes(&std::fs::read_to_string(db.path(&log)).unwrap_or_default());
        watch.check(&campaign, &db).await;
    }
    let (expected, stats) = writers.finish(&campaign, &db).await;
    eprintln!(
        "crash suite overlap: {kills} kills in {runs} runs; {overlaps} batches staged while a write round was open; writers: {stats:?}"
    );
    drain(&campaign, &db, &source_dsn, &source, slot).await;
    final_check(&campaign, &db, &target, &expected, kills).await;
    assert!(
        overlaps >= kills,
        "intake should stage while writes are open ({overlaps} batches over {kills} runs); {}",
        campaign.repro()
    );
    drop_slot(&source, slot).await;
}

/// Batches a weir log shows staged while a write round was open (between `write round
/// starts` and its `partitions written`).
fn staged_during_writes(log: &str) -> usize {
    let (mut open, mut staged) = (false, 0);
    for line in log.lines() {
        if line.contains("write round starts") {
            open = true;
        } else if line.contains("partitions written") {
            open = false;
        } else if open && line.contains(" staged ") && !line.contains("transactions=0") {
            staged += 1;
        }
    }
    staged
}

/// Whether a weir log shows the initial snapshot started and not finished.
fn killed_mid_snapshot(log: &str) -> bool {
    (log.contains("initial snapshot starts") || log.contains("first load starts"))
        && !log.contains("initial snapshot complete")
}

/// Rows per writer in the source before `weir init`, for the snapshot test:
/// `WEIR_CRASH_SNAPSHOT_ROWS` (all writers together; default 200,000).
fn snapshot_rows_per_writer(writers: i64) -> i64 {
    std::env::var("WEIR_CRASH_SNAPSHOT_ROWS")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(200_000)
        / writers
}

/// A table of 200,000 rows (REPLICA IDENTITY FULL) is snapshotted by `weir run` while
/// three writers change it, and the run is SIGKILLed during the snapshot several times;
/// then one drain, and the target is exactly the writers' committed rows. Weir reads
/// the source over TLS (`verify-full`, on the harness's TLS cluster).
#[tokio::test(flavor = "multi_thread")]
async fn crash_suite_kills_during_the_initial_snapshot_end_exact() {
    let campaign = Campaign::new("snapshot");
    let db = TestDb::new("crash_snapshot_target").await;
    let slot = "crash_snapshot";
    let per_writer = snapshot_rows_per_writer(3);
    let (source_dsn, writers_dsn, source, target) = setup_tls(
        &db,
        slot,
        &oracle_ddl("FULL", 3, per_writer),
        "snapshot_chunk_rows = 2000",
    )
    .await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    if !out.status.success() {
        campaign.fail(&db, &format!("weir init failed: {}", text(&out.stderr)));
    }
    let shape = Shape {
        large_one_in: 0,
        large_rows: (0, 0),
        pause_ms: 20,
    };
    let writers = Writers::start(&campaign, &writers_dsn, 3, per_writer, shape);
    let mut rng = campaign.rng(2);
    let kills_wanted = (kills_wanted() / 8).max(6);
    let (mut kills, mut runs, mut mid_snapshot) = (0usize, 0usize, 0usize);
    let mut watch = PositionWatch::default();
    // Whether a run has logged the snapshot's end: until then each run is killed at a
    // random moment soon after its snapshot (re)starts, since a fast engine finishes
    // the remaining chunks within a delay drawn for the whole run.
    let mut snapshot_done = false;
    while kills < kills_wanted {
        runs += 1;
        let log = format!("snapshot-run-{runs}.log");
        let mut child = spawn_weir(&db, &source_dsn, &["run"], &log);
        let delay = if !snapshot_done {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline
                && child.try_wait().expect("poll weir run").is_none()
                && !std::fs::read_to_string(db.path(&log))
                    .map(|body| {
                        body.contains("initial snapshot starts")
                            || body.contains("first load starts")
                    })
                    .unwrap_or_default()
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            rng.below(400)
        } else if rng.below(4) == 0 {
            rng.below(100)
        } else {
            400 + rng.below(2100)
        };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        if let Some(status) = child.try_wait().expect("poll weir run") {
            let body = std::fs::read_to_string(db.path(&log)).unwrap_or_default();
            if slot_busy(&body) && runs < 4 * kills_wanted {
                continue;
            }
            campaign.fail(
                &db,
                &format!("weir run exited by itself ({status}) in run {runs}"),
            );
        }
        child.kill().expect("SIGKILL weir run");
        child.wait().expect("reap weir run");
        kills += 1;
        let body = std::fs::read_to_string(db.path(&log)).unwrap_or_default();
        if killed_mid_snapshot(&body) {
            mid_snapshot += 1;
        }
        snapshot_done |= body.contains("initial snapshot complete");
        watch.check(&campaign, &db).await;
    }
    let (expected, stats) = writers.finish(&campaign, &db).await;
    eprintln!(
        "crash suite snapshot: {kills} kills ({mid_snapshot} during the snapshot) in {runs} runs; writers: {stats:?}"
    );
    drain(&campaign, &db, &source_dsn, &source, slot).await;
    final_check(&campaign, &db, &target, &expected, kills).await;
    assert!(
        mid_snapshot >= 2,
        "at least two kills should land during the snapshot, {mid_snapshot} did; {}",
        campaign.repro()
    );
    drop_slot(&source, slot).await;
}

/// The arguments of a backfill of every partition.
fn backfill_args() -> [&'static str; 8] {
    [
        "backfill",
        "--table",
        "public.oracle",
        "--from",
        WINDOW.0,
        "--to",
        WINDOW.1,
        "--parallel",
    ]
}

/// `weir backfill` of every partition, SIGKILLed part-way and run again, repairs a
/// target whose partitions were damaged by hand (rows deleted, a payload changed);
/// the target ends exact and `weir verify` passes.
#[tokio::test(flavor = "multi_thread")]
async fn crash_suite_kills_during_a_backfill_end_exact() {
    let campaign = Campaign::new("backfill");
    let db = TestDb::new("crash_backfill_target").await;
    let slot = "crash_backfill";
    let per_writer = 40_000;
    let (source_dsn, source, target) =
        setup(&db, slot, &oracle_ddl("DEFAULT", 2, per_writer), "").await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    if !out.status.success() {
        campaign.fail(&db, &format!("weir init failed: {}", text(&out.stderr)));
    }
    let shape = Shape {
        large_one_in: 150,
        large_rows: (1200, 2500),
        pause_ms: 10,
    };
    let writers = Writers::start(&campaign, &source_dsn, 2, per_writer, shape);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (expected, stats) = writers.finish(&campaign, &db).await;
    drain(&campaign, &db, &source_dsn, &source, slot).await;
    let report = check_target(&target, "analytics.oracle", &expected).await;
    if !report.is_exact() {
        campaign.fail(
            &db,
            &format!(
                "the target is not exact before any kill:\n{}",
                report.render()
            ),
        );
    }
    let mut rng = campaign.rng(3);
    let rounds = (kills_wanted() / 25).max(2);
    let (mut kills, mut partial) = (0usize, 0usize);
    for round in 0..rounds {
        // Damage every partition: its smallest id deleted, its largest id's payload
        // changed. Nothing is dirty in the stage, so only the backfill repairs them.
        target
            .batch_execute(
                "DELETE FROM analytics.oracle WHERE id IN (SELECT min(id) FROM analytics.oracle GROUP BY day);
                 UPDATE analytics.oracle SET payload = 'damaged' WHERE id IN (SELECT max(id) FROM analytics.oracle GROUP BY day);",
            )
            .await
            .expect("damage the target");
        let damaged = check_target(&target, "analytics.oracle", &expected).await;
        assert_eq!(damaged.missing, 2 * DAYS as usize, "{}", damaged.render());
        for attempt in 0..2 {
            let log = format!("backfill-{round}-{attempt}.log");
            let mut args = backfill_args().to_vec();
            args.push("1");
            let mut child = spawn_weir(&db, &source_dsn, &args, &log);
            if attempt == 0 {
                tokio::time::sleep(Duration::from_millis(50 + rng.below(1500))).await;
            } else {
                // Kill right after the next partition is repaired: mid-way for sure.
                let damaged_rows = || async {
                    target
                        .query_one(
                            "SELECT count(*) FROM analytics.oracle WHERE payload = 'damaged'",
                            &[],
                        )
                        .await
                        .expect("count damaged rows")
                        .get::<_, i64>(0)
                };
                let before = damaged_rows().await;
                let deadline = Instant::now() + Duration::from_secs(60);
                while Instant::now() < deadline
                    && child.try_wait().ok().flatten().is_none()
                    && damaged_rows().await >= before
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            if child.try_wait().expect("poll backfill").is_some() {
                continue;
            }
            child.kill().expect("SIGKILL weir backfill");
            child.wait().expect("reap weir backfill");
            kills += 1;
            let now = check_target(&target, "analytics.oracle", &expected).await;
            if now.missing > 0 && now.missing < damaged.missing {
                partial += 1;
            }
        }
        // Run again to completion: it resumes the interrupted window.
        let mut args = backfill_args().to_vec();
        args.push("2");
        let out = weir_pg(&db, &source_dsn, &args);
        let _ = std::fs::write(db.path(&format!("backfill-{round}-rerun.log")), &out.stderr);
        if !out.status.success() {
            campaign.fail(&db, &format!("the backfill re-run failed: {}", out.status));
        }
        let report = check_target(&target, "analytics.oracle", &expected).await;
        if !report.is_exact() {
            campaign.log_summary(kills, &report);
            campaign.fail(
                &db,
                &format!(
                    "after round {round} of killed backfills and a re-run:\n{}",
                    report.render()
                ),
            );
        }
    }
    let verify = weir_pg(
        &db,
        &source_dsn,
        &[
            "verify",
            "--table",
            "public.oracle",
            "--from",
            WINDOW.0,
            "--to",
            WINDOW.1,
        ],
    );
    let verified = text(&verify.stdout);
    if !verify.status.success() || !verified.contains(&format!("verify passed: {DAYS} partitions"))
    {
        campaign.fail(
            &db,
            &format!(
                "weir verify after the killed backfills: {}\n{verified}{}",
                verify.status,
                text(&verify.stderr)
            ),
        );
    }
    eprintln!(
        "crash suite backfill: {kills} kills ({partial} left the window part-repaired) over {rounds} rounds; writers: {stats:?}"
    );
    final_check(&campaign, &db, &target, &expected, kills).await;
    assert!(
        partial >= 1,
        "a kill should land mid-way through a backfill; {}",
        campaign.repro()
    );
    drop_slot(&source, slot).await;
}

/// The position an export or `checkpoint show --json` reports.
fn exported_position(stdout: &str) -> Option<u64> {
    let (_, rest) = stdout.split_once(" at position ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// `weir checkpoint export` SIGKILLed part-way while a live `weir run` stages the
/// writers' changes: the live engine goes on unharmed and catches up exactly; a later
/// export succeeds at the stage's position and imports into a consistent stage.
#[tokio::test(flavor = "multi_thread")]
async fn crash_suite_kills_during_checkpoint_export_leave_the_live_engine_exact() {
    let campaign = Campaign::new("export");
    let db = TestDb::new("crash_export_target").await;
    let slot = "crash_export";
    let per_writer = 30_000;
    // No heartbeats: the position stays put once the writers stop.
    let (source_dsn, source, target) = setup(
        &db,
        slot,
        &oracle_ddl("DEFAULT", 2, per_writer),
        "heartbeat_interval_ms = 3600000",
    )
    .await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    if !out.status.success() {
        campaign.fail(&db, &format!("weir init failed: {}", text(&out.stderr)));
    }
    let shape = Shape {
        large_one_in: 800,
        large_rows: (1200, 2500),
        pause_ms: 40,
    };
    let writers = Writers::start(&campaign, &source_dsn, 2, per_writer, shape);
    let mut live = spawn_weir(&db, &source_dsn, &["run"], "live.log");
    // Exports need a stage with rows, not a finished snapshot: wait until the live
    // engine has staged something (on a loaded machine the snapshot can take minutes).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(db.path("live.log"))
        .unwrap_or_default()
        .contains("partitions written")
    {
        if Instant::now() > deadline || live.try_wait().ok().flatten().is_some() {
            campaign.fail(&db, "the live engine wrote nothing");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let file = db.path("stage.ckpt");
    let tmp = db.path("stage.ckpt.tmp");
    let file_arg = file.to_str().expect("a UTF-8 path").to_owned();
    let started = Instant::now();
    let first = weir_pg(&db, &source_dsn, &["checkpoint", "export", &file_arg]);
    if !first.status.success() {
        campaign.fail(
            &db,
            &format!(
                "an export beside the live engine failed: {}",
                text(&first.stderr)
            ),
        );
    }
    let full = started.elapsed();
    let mut rng = campaign.rng(4);
    let kills_wanted = (kills_wanted() / 10).max(5);
    let (mut kills, mut mid_export) = (0usize, 0usize);
    // A small stage is written in a few milliseconds, so a kill may miss that window
    // every time: past the wanted kills, exports go on (killed as soon as their
    // temporary file appears) until one kill has landed in it.
    for i in 0..kills_wanted + 60 {
        if i >= kills_wanted && mid_export > 0 {
            break;
        }
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_file(&tmp);
        let mut child = spawn_weir(
            &db,
            &source_dsn,
            &["checkpoint", "export", &file_arg],
            &format!("export-{i}.log"),
        );
        if i % 2 == 0 && i < kills_wanted {
            // At a random moment of a run as long as the first export.
            let delay = full.mul_f64(rng.below(90) as f64 / 100.0);
            tokio::time::sleep(delay).await;
        } else {
            // While the file is being written: as soon as its temporary file exists
            // (a loaded machine stretches the start, so a fixed delay may miss it).
            let deadline = Instant::now() + full * 4;
            while !tmp.exists() && Instant::now() < deadline {
                if child.try_wait().expect("poll export").is_some() {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        if child.try_wait().expect("poll export").is_some() {
            continue;
        }
        child.kill().expect("SIGKILL weir checkpoint export");
        child.wait().expect("reap weir checkpoint export");
        kills += 1;
        if tmp.exists() && !file.exists() {
            mid_export += 1;
        }
        if let Some(status) = live.try_wait().expect("poll the live engine") {
            campaign.fail(
                &db,
                &format!("the live engine stopped ({status}) after a killed export"),
            );
        }
    }
    let (expected, stats) = writers.finish(&campaign, &db).await;
    // The live engine catches up by itself: the target becomes exact.
    let deadline = Instant::now() + Duration::from_secs(240);
    let report = loop {
        let report = check_target(&target, "analytics.oracle", &expected).await;
        if report.is_exact() || Instant::now() > deadline {
            break report;
        }
        if let Some(status) = live.try_wait().expect("poll the live engine") {
            campaign.fail(&db, &format!("the live engine stopped ({status})"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    campaign.log_summary(kills, &report);
    if !report.is_exact() {
        live.kill().expect("stop the live engine");
        live.wait().expect("reap the live engine");
        campaign.fail(
            &db,
            &format!(
                "the live engine did not catch up exactly after {kills} killed exports:\n{}",
                report.render()
            ),
        );
    }
    // A second export, beside the idle live engine, is whole and at a position the
    // stage held while it ran. The engine still moves its position past WAL that holds
    // nothing of this feed (other databases of the cluster write it), so the position
    // is bracketed by the stage's positions before and after the export.
    let shown_position = || {
        let shown = weir_pg(&db, &source_dsn, &["checkpoint", "show", "--json"]);
        let shown: serde_json::Value =
            serde_json::from_slice(&shown.stdout).expect("checkpoint show --json");
        shown["checkpoint"]["position"].as_u64()
    };
    let before = shown_position();
    let second = weir_pg(&db, &source_dsn, &["checkpoint", "export", &file_arg]);
    let after = shown_position();
    live.kill().expect("stop the live engine");
    live.wait().expect("reap the live engine");
    if !second.status.success() {
        campaign.fail(
            &db,
            &format!(
                "the export after the kills failed: {}",
                text(&second.stderr)
            ),
        );
    }
    let position = exported_position(&text(&second.stdout));
    assert!(
        before.is_some() && before <= position && position <= after,
        "the export is at a position the stage held ({before:?} before it, {after:?} after it): {}; {}",
        text(&second.stdout),
        campaign.repro()
    );
    let config = std::fs::read_to_string(db.config_path()).expect("read the config");
    let imported = db.path("imported.toml");
    std::fs::write(
        &imported,
        config.replace("path = \"stage\"", "path = \"imported\""),
    )
    .expect("write the import config");
    let weir_imported = |args: &[&str]| {
        let mut all = vec!["--config", imported.to_str().expect("a UTF-8 path")];
        all.extend_from_slice(args);
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(all)
            .env("WEIR_TARGET_DSN", &db.dsn)
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .output()
            .expect("run weir")
    };
    let import = weir_imported(&["checkpoint", "import", &file_arg]);
    let check = weir_imported(&["checkpoint", "check"]);
    if !import.status.success() || !check.status.success() {
        campaign.fail(
            &db,
            &format!(
                "the export does not import into a consistent stage: {}{}{}{}",
                text(&import.stdout),
                text(&import.stderr),
                text(&check.stdout),
                text(&check.stderr)
            ),
        );
    }
    eprintln!(
        "crash suite export: {kills} kills ({mid_export} while the file was being written; a full export took {full:.1?}); writers: {stats:?}"
    );
    assert!(
        mid_export >= 1,
        "a kill should land while the export writes; {}",
        campaign.repro()
    );
    drop_slot(&source, slot).await;
}

/// The checker can fail: on a target damaged by hand (a row deleted, another
/// duplicated, a third set back to an older version in another partition) it reports
/// exactly those rows, per partition.
#[tokio::test(flavor = "multi_thread")]
async fn the_checker_reports_deleted_duplicated_and_stale_rows() {
    let db = TestDb::new("crash_checker_target").await;
    let slot = "crash_checker";
    let (source_dsn, source, target) = setup(&db, slot, &oracle_ddl("DEFAULT", 1, 200), "").await;
    assert!(weir_pg(&db, &source_dsn, &["init"]).status.success());
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shape = Shape {
        large_one_in: 0,
        large_rows: (0, 0),
        pause_ms: 0,
    };
    let expected = Writer::new(1, Rng::new(1), 200, shape).model;
    let report = check_target(&target, "analytics.oracle", &expected).await;
    assert!(report.is_exact(), "{}", report.render());

    let id = |n: i64| ID_SPACE + n;
    target
        .batch_execute(&format!(
            "DELETE FROM analytics.oracle WHERE id = {};
             INSERT INTO analytics.oracle SELECT * FROM analytics.oracle WHERE id = {};",
            id(5),
            id(7)
        ))
        .await
        .expect("damage the target");
    let report = check_target(&target, "analytics.oracle", &expected).await;
    let rendered = report.render();
    assert_eq!((report.missing, report.extra), (1, 1), "{rendered}");
    assert_eq!(report.partitions.get(&day(5)), Some(&(1, 0)), "{rendered}");
    assert_eq!(report.partitions.get(&day(7)), Some(&(0, 1)), "{rendered}");
    assert!(
        rendered.contains(&format!("MISSING id {} in partition {}", id(5), day(5)))
            && rendered.contains(&format!("EXTRA id {} in partition {}", id(7), day(7)))
            && rendered.contains("a duplicate"),
        "{rendered}"
    );

    // An older version of row 9, left in the partition it has since moved away from.
    target
        .batch_execute(&format!(
            "UPDATE analytics.oracle SET seq = 1, day = '{}' WHERE id = {}",
            day(0),
            id(9)
        ))
        .await
        .expect("set a row back");
    let report = check_target(&target, "analytics.oracle", &expected).await;
    let rendered = report.render();
    assert_eq!((report.missing, report.extra), (2, 2), "{rendered}");
    assert_eq!(report.partitions.get(&day(9)), Some(&(1, 0)), "{rendered}");
    assert_eq!(report.partitions.get(&day(0)), Some(&(0, 1)), "{rendered}");
    assert!(
        rendered.contains("only an older version is there") && rendered.contains("a stale version"),
        "{rendered}"
    );
    drop_slot(&source, slot).await;
}

/// A payload PostgreSQL stores out of line: 3,000 letters that do not compress.
fn toasted(seed: u64) -> String {
    let mut rng = Rng::new(seed);
    (0..3000)
        .map(|_| char::from(b'a' + rng.below(26) as u8))
        .collect()
}

/// An update that leaves an out-of-line (TOAST) value alone arrives as an
/// "unchanged" marker, whose value is the row's previous version: found when that
/// version is in the same transaction, in an earlier transaction not yet staged, or not
/// yet read by the initial snapshot; never the older staged version.
#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toast_values_resolve_to_the_previous_version_of_the_row() {
    for (name, identity) in [("toast_default", "DEFAULT"), ("toast_full", "FULL")] {
        let db = TestDb::new(&format!("{name}_target")).await;
        let (p1, p2, p3) = (toasted(1), toasted(2), toasted(3));
        // Row 1 exists before the slot and is updated before the snapshot reads it.
        let ddl = format!(
            "{}INSERT INTO oracle VALUES (1, 1, 1, '2026-03-01', '{p1}');",
            oracle_ddl(identity, 1, 0)
        );
        let (source_dsn, source, target) = setup(&db, name, &ddl, "").await;
        assert!(weir_pg(&db, &source_dsn, &["init"]).status.success());
        source
            .batch_execute(&format!(
                "UPDATE oracle SET seq = 2 WHERE id = 1;
                 BEGIN; INSERT INTO oracle VALUES (2, 1, 3, '2026-03-02', '{p2}'); UPDATE oracle SET seq = 4, day = '2026-03-03' WHERE id = 2; COMMIT;
                 INSERT INTO oracle VALUES (3, 1, 5, '2026-03-04', '{p1}');
                 UPDATE oracle SET seq = 6, payload = '{p3}' WHERE id = 3;
                 UPDATE oracle SET seq = 7 WHERE id = 3;"
            ))
            .await
            .expect("changes");
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        assert!(out.status.success(), "{identity}: {}", text(&out.stderr));
        let expected: Rows = [
            (1, 2, "2026-03-01", &p1),
            (2, 4, "2026-03-03", &p2),
            (3, 7, "2026-03-04", &p3),
        ]
        .into_iter()
        .map(|(id, seq, day, payload)| {
            (
                id,
                OracleRow {
                    writer: 1,
                    seq,
                    day: day.to_owned(),
                    payload: Some(payload.clone()),
                },
            )
        })
        .collect();
        let report = check_target(&target, "analytics.oracle", &expected).await;
        assert!(report.is_exact(), "{identity}: {}", report.render());
        drop_slot(&source, name).await;
    }
}
