//! Section 5: WASM transform plugins. The `orders` plugin in Rust (on both contracts),
//! Python, JavaScript, C and C++, through Weir's own plugin host (`weir::plugin`),
//! against the same Rust logic compiled natively (`orders_rust::Orders`, driven through
//! the SDK's `RowSession` on contract 0.2 as the component's exports drive it):
//! throughput of partition jobs, cold and warm starts, component sizes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::partition::{Grain, Partition, partition_of};
use weir::plugin::{
    CHUNK_ROWS, InputColumns, InputRow, JobOutput, OutputCheck, OwnedJob, Plugin, PluginHost,
    SandboxLimits, run_job_on_thread,
};
use weir::source::Op;
use weir::value::Value;
use weir_core::fixtures::ORDERS_COLUMN_TYPES;
use weir_plugin::contract_0_2 as v2;
use weir_plugin::contract_0_2::GuestSession as _;

/// The table the jobs belong to.
const TABLE: &str = "public.orders";
/// The one partition of every job: 2026-03-01, in days since 1970-01-01.
const ORDER_DATE: i32 = 20_513;
/// The plugin's config.
const RATE: &str = "1.0825";
/// Empty jobs timed per plugin (a fresh instance, the session's constructor and
/// `finish`, no rows); the median is reported.
const EMPTY_JOBS: usize = 5;

/// The plugins measured: component file stem and language.
const PLUGINS: [(&str, &str); 10] = [
    ("orders-rust", "Rust"),
    ("orders-rust-0-1", "Rust"),
    ("orders-c", "C"),
    ("orders-c-0-1", "C"),
    ("orders-cpp", "C++"),
    ("orders-cpp-0-1", "C++"),
    ("orders-python", "Python"),
    ("orders-python-0-1", "Python"),
    ("orders-js", "JavaScript"),
    ("orders-js-0-1", "JavaScript"),
];

/// The input columns of the jobs (the source table's).
fn input_columns() -> InputColumns {
    InputColumns::new(
        ORDERS_COLUMN_TYPES
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t.to_owned()))
            .collect(),
        &["id".to_owned()],
    )
}

/// What the section is told by the command line.
#[derive(Debug, Clone)]
pub struct PluginBenchArgs {
    /// Rows of one partition job.
    pub rows: usize,
    /// Timed jobs run until at least this much time has passed (at least one job).
    pub seconds: f64,
    /// Loads per plugin for each of the cold and warm start; the median is reported.
    pub starts: usize,
    /// Where the components are.
    pub dir: PathBuf,
    /// The command that produced the section, as written in it.
    pub command: String,
}

/// The default components folder: `$CARGO_TARGET_DIR/plugins`, the target folder
/// defaulting to `$HOME/.cache/weir-target` (as `scripts/bench` builds them).
pub fn default_plugins_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("weir-target"))
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("plugins")
}

/// The input of one job: `rows` orders of one day, about 200 bytes of column values
/// each, with the same images as SDK rows for the native baseline (in chunks of
/// `CHUNK_ROWS`, as the host pushes them).
struct Workload {
    host_rows: Vec<InputRow>,
    native_chunks: Vec<Vec<v2::StagedRow>>,
    /// Mean bytes of column values per row (8 per integer, 4 per date, text and
    /// decimal text by their UTF-8 length).
    row_bytes: f64,
}

fn workload(rows: usize) -> Workload {
    const STATUSES: [&str; 5] = ["new", "paid", "shipped", "delivered", "cancelled"];
    let mut seq = weir::demo::Sequence::new(17);
    let mut payload = 0usize;
    let host_rows: Vec<InputRow> = (1..=rows as u64)
        .map(|id| {
            let cents = seq.below(10_000_000);
            let customer = format!(
                "customer {id:08}: Example Trading Company Ltd., {} Harbour Road, unit {}, \
                 Port Example EX{:04}, account manager J. Example, terms net 30, deliveries to \
                 dock 7 before noon",
                1 + id % 997,
                1 + id % 53,
                id % 9973
            );
            let amount = format!("{}.{:02}", cents / 100, cents % 100);
            let status = STATUSES[(id % 5) as usize];
            payload += 8 + customer.len() + 4 + amount.len() + status.len();
            InputRow {
                key: vec![Value::Int(id as i64)],
                op: Op::Insert,
                commit_position: id,
                // 2026-03-01T00:00:00Z plus a millisecond per order.
                commit_time: Some(1_772_323_200_000_000 + id as i64 * 1000),
                columns: vec![
                    ("id".to_owned(), Value::Int(id as i64)),
                    ("customer".to_owned(), Value::Text(customer)),
                    ("order_date".to_owned(), Value::Date(ORDER_DATE)),
                    ("amount".to_owned(), Value::Decimal(amount)),
                    ("status".to_owned(), Value::Text(status.to_owned())),
                ],
            }
        })
        .collect();
    let native_chunks = host_rows
        .chunks(CHUNK_ROWS)
        .map(|chunk| chunk.iter().map(staged_row).collect())
        .collect();
    Workload {
        row_bytes: payload as f64 / rows.max(1) as f64,
        host_rows,
        native_chunks,
    }
}

fn sdk_value(v: &Value) -> weir_plugin::Value {
    use weir_plugin::Value as S;
    match v {
        Value::Null => S::Null,
        Value::Bool(b) => S::Boolean(*b),
        Value::Int(i) => S::Integer(*i),
        Value::Float(f) => S::Float(*f),
        Value::Text(s) => S::Text(s.clone()),
        Value::Bytes(b) => S::Bytes(b.clone()),
        Value::Decimal(s) => S::Decimal(s.clone()),
        Value::Date(d) => S::Date(*d),
        Value::Timestamp(t) => S::Timestamp(*t),
        Value::Json(s) => S::Json(s.clone()),
        Value::Unsupported { type_name, text } => S::Unsupported(weir_plugin::UnsupportedValue {
            type_name: type_name.clone(),
            text: text.clone(),
        }),
    }
}

fn host_value(v: &weir_plugin::Value) -> Value {
    engine_value(v.clone())
}

/// A row as contract 0.2 gives it (the workload's rows hold every column, in the
/// input columns' order).
fn staged_row(r: &InputRow) -> v2::StagedRow {
    v2::StagedRow {
        key: r.key.iter().map(sdk_value).collect(),
        values: r.columns.iter().map(|(_, v)| Some(sdk_value(v))).collect(),
        op: match r.op {
            Op::Insert => v2::Op::Insert,
            Op::Update => v2::Op::Update,
            Op::Delete => v2::Op::Delete,
            Op::Read => v2::Op::Read,
        },
        commit_position: r.commit_position,
        commit_time: r.commit_time,
    }
}

fn sdk_schema() -> v2::InputSchema {
    let input = input_columns();
    v2::InputSchema {
        columns: input
            .names
            .into_iter()
            .zip(input.types)
            .map(|(name, type_name)| v2::InputColumn { name, type_name })
            .collect(),
        key: input.key,
    }
}

fn config() -> Vec<(String, String)> {
    vec![("rate".to_owned(), RATE.to_owned())]
}

/// One native job: a `RowSession<Orders>` constructed, pushed every chunk and
/// finished, its rows collected as the host collects them. Each chunk is cloned for
/// the push outside the clock (the plugin's input is already in the guest's types).
/// Returns the rows and the time on the clock.
fn native_job(
    chunks: &[Vec<v2::StagedRow>],
    partition: &str,
) -> anyhow::Result<(Vec<Vec<weir_plugin::Value>>, Duration)> {
    let mut clock = Duration::ZERO;
    let info = v2::PartitionInfo {
        table: TABLE.to_owned(),
        name: partition.to_owned(),
    };
    let config = config();
    let schema = sdk_schema();
    let started = Instant::now();
    let session = weir_plugin::RowSession::<orders_rust::Orders>::new(info, schema, config);
    let mut rows = Vec::new();
    let mut rejections = 0usize;
    clock += started.elapsed();
    for chunk in chunks {
        let chunk = chunk.clone();
        let started = Instant::now();
        let out = session
            .push(chunk)
            .map_err(|e| anyhow::anyhow!("native push: {e:?}"))?;
        anyhow::ensure!(!out.more, "a row session handed its output in parts");
        rows.extend(out.rows);
        rejections += out.rejections.len();
        clock += started.elapsed();
    }
    let started = Instant::now();
    let out = session
        .finish()
        .map_err(|e| anyhow::anyhow!("native finish: {e:?}"))?;
    rows.extend(out.rows);
    rejections += out.rejections.len();
    clock += started.elapsed();
    anyhow::ensure!(
        rejections == 0,
        "the native session rejected {rejections} rows"
    );
    Ok((rows, clock))
}

/// One native job as the engine would run a plugin linked into it: the same
/// `RowSession<Orders>` on contract 0.2, but with the engine's side on the clock too:
/// each chunk of the engine's rows converted into the SDK's (as the host lowers them),
/// the output converted back into the engine's values and checked by the host's own
/// `OutputCheck` (types, partition, grain key; `checker` is the loaded component,
/// whose description it checks against). What it costs over this is the sandbox's.
fn native_engine_job(
    rows: &[InputRow],
    checker: &Plugin,
    job: &OwnedJob,
) -> anyhow::Result<(usize, Duration)> {
    let Partition::Key(partition) = &job.partition else {
        anyhow::bail!("the day partition of a date is not a key");
    };
    let spec = job.spec();
    let started = Instant::now();
    let info = v2::PartitionInfo {
        table: TABLE.to_owned(),
        name: partition.clone(),
    };
    let session = weir_plugin::RowSession::<orders_rust::Orders>::new(info, sdk_schema(), config());
    let mut check = OutputCheck::new(checker, "native", &spec);
    let mut count = 0;
    let mut take = |out: v2::PushOutput| -> anyhow::Result<()> {
        anyhow::ensure!(
            out.rejections.is_empty() && !out.more,
            "the native session rejected rows or answered in parts"
        );
        let mut rows: Vec<Vec<Value>> = out
            .rows
            .into_iter()
            .map(|r| r.into_iter().map(engine_value).collect())
            .collect();
        check.check(&mut rows)?;
        count += rows.len();
        Ok(())
    };
    for chunk in rows.chunks(CHUNK_ROWS) {
        let staged = chunk.iter().map(staged_row).collect();
        take(
            session
                .push(staged)
                .map_err(|e| anyhow::anyhow!("native push: {e:?}"))?,
        )?;
    }
    take(
        session
            .finish()
            .map_err(|e| anyhow::anyhow!("native finish: {e:?}"))?,
    )?;
    Ok((count, started.elapsed()))
}

/// An SDK value as the engine's, moved (as the host lifts output).
fn engine_value(v: weir_plugin::Value) -> Value {
    use weir_plugin::Value as S;
    match v {
        S::Null => Value::Null,
        S::Boolean(b) => Value::Bool(b),
        S::Integer(i) => Value::Int(i),
        S::Float(f) => Value::Float(f),
        S::Text(s) => Value::Text(s),
        S::Bytes(b) => Value::Bytes(b),
        S::Decimal(s) => Value::Decimal(s),
        S::Date(d) => Value::Date(d),
        S::Timestamp(t) => Value::Timestamp(t),
        S::Json(s) => Value::Json(s),
        S::Unsupported(u) => Value::Unsupported {
            type_name: u.type_name,
            text: u.text,
        },
    }
}

fn native_engine_throughput(
    work: &Workload,
    checker: &Plugin,
    job: &OwnedJob,
    budget: Duration,
) -> anyhow::Result<Throughput> {
    let mut t = Throughput {
        jobs: 0,
        rows: 0,
        time: Duration::ZERO,
        fastest: Duration::MAX,
    };
    while t.jobs == 0 || t.time < budget {
        let (rows, clock) = native_engine_job(&work.host_rows, checker, job)?;
        anyhow::ensure!(rows == work.host_rows.len(), "native rows lost");
        t.jobs += 1;
        t.rows += rows;
        t.time += clock;
        t.fastest = t.fastest.min(clock);
    }
    Ok(t)
}

/// Throughput of one path: jobs timed until the budget is spent.
#[derive(Debug, Clone)]
struct Throughput {
    jobs: usize,
    rows: usize,
    time: Duration,
    /// The fastest job: on a shared machine, the least disturbed measure of one.
    fastest: Duration,
}

impl Throughput {
    fn rate(&self) -> f64 {
        self.rows as f64 / self.time.as_secs_f64()
    }
}

fn native_throughput(
    work: &Workload,
    partition: &str,
    budget: Duration,
) -> anyhow::Result<(Throughput, Vec<Vec<Value>>)> {
    // An untimed first job, whose rows the plugins' are checked against.
    let (expected, _) = native_job(&work.native_chunks, partition)?;
    anyhow::ensure!(
        expected.len() == work.host_rows.len(),
        "the native session returned {} rows for {}",
        expected.len(),
        work.host_rows.len()
    );
    let expected: Vec<Vec<Value>> = expected
        .iter()
        .map(|row| row.iter().map(host_value).collect())
        .collect();
    let mut t = Throughput {
        jobs: 0,
        rows: 0,
        time: Duration::ZERO,
        fastest: Duration::MAX,
    };
    while t.jobs == 0 || t.time < budget {
        let (rows, clock) = native_job(&work.native_chunks, partition)?;
        anyhow::ensure!(rows.len() == work.host_rows.len(), "native rows lost");
        t.jobs += 1;
        t.rows += rows.len();
        t.time += clock;
        t.fastest = t.fastest.min(clock);
    }
    Ok((t, expected))
}

/// One job through the host, as the engine runs it: on a thread of its own, a fresh
/// instance, the rows converted and pushed in chunks, the output checked. The rows of
/// `work` are the input, and are put back afterwards.
async fn host_job(
    plugin: &Arc<Plugin>,
    job: &OwnedJob,
    work: &mut Workload,
) -> anyhow::Result<(JobOutput, Duration)> {
    let input = std::mem::take(&mut work.host_rows);
    let started = Instant::now();
    let (input, result) = run_job_on_thread(
        Arc::clone(plugin),
        SandboxLimits::default(),
        job.clone(),
        input,
    )
    .await;
    let elapsed = started.elapsed();
    work.host_rows = input;
    Ok((result?, elapsed))
}

/// A job of no rows (the instance, the constructor and `finish`).
async fn empty_job(plugin: &Arc<Plugin>, job: &OwnedJob) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let (_, result) = run_job_on_thread(
        Arc::clone(plugin),
        SandboxLimits::default(),
        job.clone(),
        Vec::new(),
    )
    .await;
    let elapsed = started.elapsed();
    anyhow::ensure!(result?.rows.is_empty(), "rows out of an empty job");
    Ok(elapsed)
}

/// What was measured of one plugin.
#[derive(Debug)]
struct Measured {
    size_bytes: u64,
    cold: Vec<Duration>,
    warm: Vec<Duration>,
    /// `compile_info().millis` of the cold and warm loads: compiling, or reading the
    /// cached compilation.
    cold_compile_ms: Vec<u64>,
    warm_compile_ms: Vec<u64>,
    empty_job: Duration,
    throughput: Throughput,
    peak_memory_bytes: usize,
    fuel_per_row: f64,
    /// The contract the component implements (`0.2.0`).
    contract: &'static str,
}

fn jobs(n: usize) -> String {
    format!("{n} job{}", if n == 1 { "" } else { "s" })
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ms_list(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.0}", ms(*d)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A plugin job's output is exactly the native session's: nothing rejected, every row
/// equal and in the same order.
fn check_output(name: &str, out: &JobOutput, expected: &[Vec<Value>]) -> anyhow::Result<()> {
    anyhow::ensure!(
        out.rejections.is_empty(),
        "{name}: {} rows rejected, the first: {:?}",
        out.rejections.len(),
        out.rejections.first()
    );
    anyhow::ensure!(
        out.rows.len() == expected.len(),
        "{name}: {} rows out of {}",
        out.rows.len(),
        expected.len()
    );
    if let Some(i) = (0..expected.len()).find(|&i| out.rows[i] != expected[i]) {
        anyhow::bail!(
            "{name}: row {i} differs from the native output: {:?} against {:?}",
            out.rows[i],
            expected[i]
        );
    }
    Ok(())
}

/// Measures one plugin: starts, an empty job, then timed jobs, the first one checked.
async fn measure_plugin(
    path: &Path,
    warm_up: &Path,
    args: &PluginBenchArgs,
    work: &mut Workload,
    job: &OwnedJob,
    expected: &[Vec<Value>],
) -> anyhow::Result<Measured> {
    let limits = SandboxLimits::default();
    let name = path.display().to_string();
    // Cold: compiled each time, no cache. The host's engine is made by a first load
    // (of the smallest component), outside the clock: a running engine has it already.
    let cold_host = PluginHost::new(None);
    cold_host
        .load(warm_up, &limits)
        .with_context(|| format!("load {}", warm_up.display()))?;
    let (mut cold, mut cold_compile_ms) = (Vec::new(), Vec::new());
    for _ in 0..args.starts {
        let started = Instant::now();
        let plugin = cold_host.load(path, &limits)?;
        cold.push(started.elapsed());
        anyhow::ensure!(
            !plugin.compile_info().cache_hit,
            "{name}: cold load hit a cache"
        );
        cold_compile_ms.push(plugin.compile_info().millis);
    }
    drop(cold_host);
    // Warm: from the compiled-component disk cache, filled by a first load.
    let cache = tempfile::tempdir()?;
    let warm_host = PluginHost::new(Some(cache.path().to_owned()));
    warm_host.load(path, &limits)?;
    let (mut warm, mut warm_compile_ms) = (Vec::new(), Vec::new());
    let mut loaded = None;
    for _ in 0..args.starts {
        let started = Instant::now();
        let plugin = warm_host.load(path, &limits)?;
        warm.push(started.elapsed());
        anyhow::ensure!(
            plugin.compile_info().cache_hit,
            "{name}: warm load missed the cache"
        );
        warm_compile_ms.push(plugin.compile_info().millis);
        loaded = Some(plugin);
    }
    let plugin = Arc::new(loaded.context("no load")?);
    let size_bytes = plugin.size_bytes();

    let mut empty = Vec::new();
    for _ in 0..EMPTY_JOBS {
        empty.push(empty_job(&plugin, job).await?);
    }

    // Jobs one after another until the budget has passed; the first one's output must
    // equal the native session's, row for row (a slow plugin runs one job in all, so
    // checking it on an extra, untimed job would double its time).
    let budget = Duration::from_secs_f64(args.seconds);
    let mut t = Throughput {
        jobs: 0,
        rows: 0,
        time: Duration::ZERO,
        fastest: Duration::MAX,
    };
    let (mut peak_memory_bytes, mut fuel_per_row) = (0, 0.0);
    while t.jobs == 0 || t.time < budget {
        let (out, elapsed) = host_job(&plugin, job, work).await?;
        if t.jobs == 0 {
            check_output(&name, &out, expected)?;
            peak_memory_bytes = out.peak_memory_bytes;
            fuel_per_row = out.fuel as f64 / expected.len().max(1) as f64;
        }
        anyhow::ensure!(out.rows.len() == work.host_rows.len(), "{name}: rows lost");
        t.jobs += 1;
        t.rows += out.rows.len();
        t.time += elapsed;
        t.fastest = t.fastest.min(elapsed);
    }
    Ok(Measured {
        size_bytes,
        cold,
        warm,
        cold_compile_ms,
        warm_compile_ms,
        empty_job: median(&empty),
        throughput: t,
        peak_memory_bytes,
        fuel_per_row,
        contract: plugin.contract(),
    })
}

/// Section 5: the orders plugin in three languages against its native Rust logic.
/// Returns the Rust component's time per row over the native one's, if it ran.
pub async fn plugins(out: &mut String, args: &PluginBenchArgs) -> anyhow::Result<Option<f64>> {
    anyhow::ensure!(args.rows > 0, "--plugin-rows must be at least 1");
    anyhow::ensure!(args.starts > 0, "--plugin-starts must be at least 1");
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    let date = chrono::Utc::now().format("%Y-%m-%d");
    let partition = partition_of("order_date", Grain::Day, &Value::Date(ORDER_DATE))?;
    let Partition::Key(partition_name) = &partition else {
        anyhow::bail!("the day partition of a date is not a key");
    };
    let job = OwnedJob {
        table: TABLE.to_owned(),
        partition: partition.clone(),
        grain: Grain::Day,
        config: config(),
        input: input_columns(),
    };
    let mut work = workload(args.rows);
    let budget = Duration::from_secs_f64(args.seconds);

    let (native, expected) = native_throughput(&work, partition_name, budget)?;
    println!(
        "plugins: native Rust {:.0} rows/s ({} of {} rows in {:.2} s), fastest job {:.2} ms",
        native.rate(),
        jobs(native.jobs),
        args.rows,
        native.time.as_secs_f64(),
        ms(native.fastest)
    );
    let paths: Vec<PathBuf> = PLUGINS
        .iter()
        .map(|(stem, _)| args.dir.join(format!("{stem}.wasm")))
        .collect();
    // The native plugin inside the engine's job, checked against the Rust component's
    // description (so only if it is built).
    let native_engine = match PluginHost::new(None).load(&paths[0], &SandboxLimits::default()) {
        Ok(checker) => {
            let t = native_engine_throughput(&work, &checker, &job, budget)?;
            println!(
                "plugins: native Rust in the engine's job {:.0} rows/s ({} in {:.2} s), fastest job {:.2} ms",
                t.rate(),
                jobs(t.jobs),
                t.time.as_secs_f64(),
                ms(t.fastest)
            );
            Some(t)
        }
        Err(e) => {
            println!("plugins: no native job in the engine's path: {e}");
            None
        }
    };
    // The component whose load makes a host's engine before the clocked loads.
    let warm_up = paths
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.len(), p)))
        .min()
        .map(|(_, p)| p.clone());
    let mut results = Vec::new();
    for ((stem, language), path) in PLUGINS.into_iter().zip(&paths) {
        let Some(warm_up) = warm_up.as_deref().filter(|_| path.is_file()) else {
            println!("plugins: {} not built", path.display());
            results.push((stem, language, None));
            continue;
        };
        let m = match measure_plugin(path, warm_up, args, &mut work, &job, &expected).await {
            Ok(m) => m,
            Err(e) => {
                // Reported in the section (a plugin may fail under the default limits).
                let error = format!("{e:#}");
                println!("plugins: {stem} failed: {error}");
                if work.host_rows.len() != args.rows {
                    // The input was lost with the job's thread.
                    work = workload(args.rows);
                }
                results.push((stem, language, Some(Err(error))));
                continue;
            }
        };
        println!(
            "plugins: {stem} {:.0} rows/s ({} in {:.2} s), fastest job {:.2} ms, cold start {} ms, warm start {} ms, empty job {:.1} ms",
            m.throughput.rate(),
            jobs(m.throughput.jobs),
            m.throughput.time.as_secs_f64(),
            ms(m.throughput.fastest),
            ms_list(&m.cold),
            ms_list(&m.warm),
            ms(m.empty_job)
        );
        results.push((stem, language, Some(Ok(m))));
    }

    writeln!(
        out,
        "\n## WASM transform plugins: the orders plugin in Rust, C, C++, Python and JavaScript against native Rust\n"
    )?;
    writeln!(
        out,
        "The `orders` example plugin (`plugins/examples/orders-rust`; `orders-c`, `orders-cpp`, `orders-python`, \
         `orders-js`: the same rules on their SDKs, tested against the same cases), each on contract 0.2 and, as \
         `…-0-1`, the same source built on contract 0.1 (`plugins/compat/orders-rust-0-1` for Rust, a build flag \
         for the others) as WebAssembly components built by `scripts/build-plugins`, run through \
         Weir's own plugin host (`weir::plugin`, wasmtime {wasmtime}, Cranelift, default sandbox limits), against \
         the same Rust source compiled natively in this release build (`orders_rust::Orders` in the SDK's \
         `RowSession` driven on contract 0.2, the session the component exports; the crates `plugins/examples/orders-rust` and \
         `plugins/sdk` as path dependencies of the benchmark). Input: partition jobs of {rows} orders of one day \
         (`{TABLE}`, partition {partition_name}, config `rate = {RATE}`), about {row_bytes:.0} bytes of column values \
         per row (`id`, a {customer}-byte `customer`, `order_date`, `amount` like `12345.67`, `status`), pushed in \
         chunks of {CHUNK_ROWS} rows; every row comes out (`amount_eur` computed, `status` upper-cased).\n",
        wasmtime = weir::plugin::WASMTIME_VERSION,
        rows = args.rows,
        row_bytes = work.row_bytes,
        customer = match work.host_rows.first().map(|r| &r.columns[1].1) {
            Some(Value::Text(s)) => s.len(),
            _ => 0,
        },
    )?;
    writeln!(
        out,
        "* **rows/s**: jobs run one after another until at least {:.1} s had passed, each timed whole as the engine \
         runs one (`run_job_on_thread`): a job thread (kept between jobs, as the engine keeps them), a fresh \
         instance from the engine's instance pool, or on demand for a component that does not fit it (no state \
         is shared between jobs), the session's \
         constructor, the rows converted to WIT values and pushed chunk by chunk, `finish`, the output converted \
         back and checked (types, partition, grain key unique). Loading and compiling are not on the clock; \
         instantiation is. Native: the same rows already in the SDK's types (converted once, each chunk cloned \
         outside the clock for the push that consumes it), the session constructed, pushed, finished, its rows \
         collected. Native in the engine's job: the same native session with the engine's own work on the \
         clock as well, each chunk of the engine's rows converted into the SDK's and the output converted back \
         and checked by the host's `OutputCheck`, as a plugin linked into the engine would be run. The first \
         timed job of each plugin was checked to give exactly the native output, row for row (its memory and \
         fuel are the figures below). **fastest job**: the least time one of those jobs took, the figure least \
         disturbed by other processes on a shared machine.\n\
         * **cold start**: `PluginHost::load` with no cache: read the file, sha256, compile with Cranelift, link, \
         and call `describe` in a fresh instance; **warm start**: the same from the compiled-component disk cache \
         (read, checksum, deserialize). Median of {} loads each, in a host whose engine was already made. \
         **empty job**: the median of {EMPTY_JOBS} jobs of no rows (thread, instance, constructor, `finish`), the \
         cost every partition job pays before its rows.\n",
        args.seconds, args.starts
    )?;
    writeln!(
        out,
        "| plugin | language | contract | component size (KiB) | cold start (ms) | warm start (ms) | empty job (ms) | rows/s | time per row / native | fastest job (ms) | fastest / native's |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    writeln!(
        out,
        "| `orders_rust::Orders`, native (baseline) | Rust | 0.2.0 (native) | — | — | — | — | {:.0} | 1.00 | {:.2} | 1.00 |",
        native.rate(),
        ms(native.fastest)
    )?;
    if let Some(t) = &native_engine {
        writeln!(
            out,
            "| `orders_rust::Orders`, native in the engine's job (rows converted both ways, output checked) | Rust | 0.2.0 (native) | — | — | — | — | {:.0} | {:.2} | {:.2} | {:.2} |",
            t.rate(),
            native.rate() / t.rate(),
            ms(t.fastest),
            ms(t.fastest) / ms(native.fastest)
        )?;
    }
    for (stem, language, m) in &results {
        match m {
            Some(Ok(m)) => writeln!(
                out,
                "| `{stem}.wasm` | {language} | {} | {:.0} | {:.0} | {:.1} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} |",
                m.contract,
                m.size_bytes as f64 / 1024.0,
                ms(median(&m.cold)),
                ms(median(&m.warm)),
                ms(m.empty_job),
                m.throughput.rate(),
                native.rate() / m.throughput.rate(),
                ms(m.throughput.fastest),
                ms(m.throughput.fastest) / ms(native.fastest)
            )?,
            Some(Err(_)) => writeln!(
                out,
                "| `{stem}.wasm` | {language} | — | failed (below) | — | — | — | — | — | — | — |"
            )?,
            None => writeln!(
                out,
                "| `{stem}.wasm` | {language} | — | not built | — | — | — | — | — | — | — |"
            )?,
        }
    }
    let measured = |stem: &str| {
        results.iter().find_map(|(s, _, m)| match m {
            Some(Ok(m)) if *s == stem => Some(m),
            _ => None,
        })
    };
    if let Some(rust) = measured("orders-rust") {
        let ratio = native.rate() / rust.throughput.rate();
        writeln!(
            out,
            "\nThe Rust plugin on contract {} takes {ratio:.2}× the native time per row (goal: within 1.5×: {}); its fastest job took {:.2}× the native's fastest.",
            rust.contract,
            if ratio <= 1.5 { "met" } else { "not met" },
            ms(rust.throughput.fastest) / ms(native.fastest)
        )?;
        if let Some(t) = &native_engine {
            writeln!(
                out,
                "Against the native plugin in the engine's own job path (the same conversions and output checks on the clock, so that the difference is the sandbox and the component boundary alone) it takes {:.2}×.",
                t.rate() / rust.throughput.rate()
            )?;
        }
    }
    // Each language's component on contract 0.2 against the same source on 0.1.
    let mut pairs = Vec::new();
    for (stem, language) in PLUGINS {
        let (Some(new), Some(old)) = (measured(stem), measured(&format!("{stem}-0-1"))) else {
            continue;
        };
        pairs.push(format!(
            "{language} {:.2}× ({:.0} against {:.0} fuel per row)",
            new.throughput.rate() / old.throughput.rate(),
            new.fuel_per_row,
            old.fuel_per_row
        ));
    }
    if !pairs.is_empty() {
        writeln!(
            out,
            "\nContract 0.2 against 0.1, rows per second, the same source on each: {}.",
            pairs.join("; ")
        )?;
    }
    let mut details = vec![format!(
        "native {} in {:.2} s",
        jobs(native.jobs),
        native.time.as_secs_f64()
    )];
    for (stem, _, m) in &results {
        if let Some(Ok(m)) = m {
            details.push(format!(
                "{stem} {} in {:.2} s, cold starts {} ms (compile {} ms), warm starts {} ms (cache read {} ms), \
                 {:.1} MiB of linear memory and tables at most (the cap is {} MiB), {:.0} fuel per row ({:.1}% of \
                 the default budget of a push of {CHUNK_ROWS} rows: per call plus per row)",
                jobs(m.throughput.jobs),
                m.throughput.time.as_secs_f64(),
                ms_list(&m.cold),
                m.cold_compile_ms
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                ms_list(&m.warm),
                m.warm_compile_ms
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                m.peak_memory_bytes as f64 / 1_048_576.0,
                weir::plugin::DEFAULT_MEMORY_BYTES >> 20,
                m.fuel_per_row,
                m.fuel_per_row * CHUNK_ROWS as f64 * 100.0
                    / (weir::plugin::DEFAULT_FUEL_PER_CALL
                        + weir::plugin::DEFAULT_FUEL_PER_ROW * CHUNK_ROWS as u64)
                        as f64
            ));
        }
    }
    writeln!(out, "\nAll runs: {}.", details.join("; "))?;
    for (stem, _, m) in &results {
        if let Some(Err(error)) = m {
            writeln!(out, "\nFailed: {stem}: {error}")?;
        }
    }
    let missing: Vec<&str> = results
        .iter()
        .filter(|(_, _, m)| m.is_none())
        .map(|(s, _, _)| *s)
        .collect();
    if !missing.is_empty() {
        writeln!(
            out,
            "\nNot built: {} (no such component in {}; `scripts/bench` builds them with `scripts/build-plugins`).",
            missing.join(", "),
            args.dir.display()
        )?;
    }
    writeln!(
        out,
        "\nMeasured on {date} by `{}`; the 1-minute load average when this section began was {load} (other \
         processes share the machine).",
        args.command
    )?;
    Ok(results.iter().find_map(|(s, _, m)| match m {
        Some(Ok(m)) if *s == "orders-rust" => Some(native.rate() / m.throughput.rate()),
        _ => None,
    }))
}
