//! `weir plugin`: runs a WebAssembly transform on sample rows in the sandbox (`test`),
//! or prints what it declares (`inspect`), without a pipeline.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;

/// Runs `weir plugin COMMAND`.
pub(crate) async fn run(command: PluginCommand) -> anyhow::Result<()> {
    use weir::plugin::{self, PluginHost, json};
    let host = PluginHost::new(PluginHost::default_cache_dir());
    match command {
        PluginCommand::New { name, lang, dir } => super::plugin_new::new(&name, lang, dir),
        PluginCommand::Build { dir } => super::plugin_new::build(&dir).await,
        PluginCommand::Inspect {
            wasm,
            json: as_json,
        } => {
            let limits = plugin::SandboxLimits::default();
            let loaded = tokio::task::spawn_blocking(move || {
                let p = host.load(&wasm, &limits);
                (host, p)
            })
            .await
            .context("the plugin task stopped unexpectedly")?;
            let p = loaded.1?;
            let d = p.description();
            let mut out = std::io::stdout();
            if as_json {
                let j = serde_json::json!({
                    "path": p.path().display().to_string(),
                    "name": d.name, "version": d.version, "kind": d.kind,
                    "contract": format!("weir:transform@{}", p.contract()),
                    "columns": d.columns, "grain_key": d.grain_key,
                    "partition_column": d.partition_column,
                    "sha256": p.sha256_hex(), "size_bytes": p.size_bytes(),
                    "imports": p.imports(), "reads_clock": p.reads_clock(),
                    "wasmtime": plugin::WASMTIME_VERSION,
                    "compile": p.compile_info(),
                });
                serde_json::to_writer_pretty(&mut out, &j)?;
                writeln!(out)?;
                return Ok(());
            }
            writeln!(out, "plugin:           {} {}", d.name, d.version)?;
            writeln!(
                out,
                "kind:             {}",
                serde_json::to_value(d.kind)?.as_str().unwrap_or("?")
            )?;
            writeln!(out, "contract:         weir:transform@{}", p.contract())?;
            writeln!(out, "sha256:           {}", p.sha256_hex())?;
            writeln!(out, "size:             {} bytes", p.size_bytes())?;
            writeln!(out, "partition column: {}", d.partition_column)?;
            writeln!(
                out,
                "grain key:        {}",
                if d.grain_key.is_empty() {
                    "(none)".to_owned()
                } else {
                    d.grain_key.join(", ")
                }
            )?;
            writeln!(out, "columns:")?;
            for c in &d.columns {
                writeln!(
                    out,
                    "  {:<20} {}{}",
                    c.name,
                    c.ty.ddl(),
                    if c.nullable { "" } else { " not null" }
                )?;
            }
            writeln!(out, "imports:")?;
            for i in p.imports() {
                writeln!(out, "  {i}")?;
            }
            writeln!(
                out,
                "clock:            {}",
                if p.reads_clock() {
                    "imports one (the partition's newest commit time: a job that reads it reads every row's header for it)"
                } else {
                    "none (a merge reads only the changed rows)"
                }
            )?;
            let c = p.compile_info();
            writeln!(
                out,
                "compiled:         {} ms ({}, wasmtime {})",
                c.millis,
                if c.cache_hit { "cache hit" } else { "compiled" },
                plugin::WASMTIME_VERSION
            )?;
            Ok(())
        }
        PluginCommand::Test {
            wasm,
            cases,
            input,
            partition,
            grain,
            table,
            config_values,
            key,
            columns,
            repeat,
            limits,
        } => {
            let grain: weir::partition::Grain =
                serde_json::from_value(serde_json::Value::String(grain.clone())).map_err(|_| {
                    super::usage(format!("--grain `{grain}`: use hour, day, month or value"))
                })?;
            let mut config: Vec<(String, String)> = Vec::with_capacity(config_values.len());
            for kv in &config_values {
                let (k, v) = kv.split_once('=').ok_or_else(|| {
                    super::usage(format!("--config-value `{kv}`: write KEY=VALUE"))
                })?;
                if config.iter().any(|(seen, _)| seen == k) {
                    return Err(super::usage(format!(
                        "--config-value: `{k}` is given twice; give each key once, as a table's plugin_config holds it"
                    )));
                }
                config.push((k.to_owned(), v.to_owned()));
            }
            let config = plugin::normalize_config(&config);
            let limits_of_flags = limits.limits();
            if let Some(cases) = cases {
                return run_cases(host, &wasm, &cases, grain, limits_of_flags).await;
            }
            // Clap requires both without `--cases`.
            let (Some(input), Some(partition)) = (input, partition) else {
                return Err(super::usage(
                    "give --input and --partition, or --cases".into(),
                ));
            };
            let text = if input.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("read rows from stdin")?
            } else {
                std::fs::read_to_string(&input)
                    .with_context(|| format!("read rows from {}", input.display()))?
            };
            let (types, epochs) = column_types(&columns)?;
            let schema = json::InputSchema {
                key_columns: key,
                types,
                epochs,
            };
            let read = json::read_input_rows(&text, &input.display().to_string(), &schema)?;
            for name in column_texts(&columns).map(|(name, _)| name) {
                if !read
                    .iter()
                    .any(|(_, row)| row.columns.iter().any(|(c, _)| c == name))
                {
                    return Err(super::usage(format!(
                        "--column {name}: no input row has a column `{name}`; check its spelling"
                    )));
                }
            }
            let (staged, notes) = as_staged(read);
            let (lines, rows): (Vec<usize>, Vec<_>) = staged.into_iter().unzip();
            let partition = weir::partition::Partition::from_name(&partition);
            let limits = limits_of_flags;
            // The input columns as a 0.2 session sees them: the rows' columns in order
            // of first appearance, typed as `--column` gave them.
            let input_columns = plugin::InputColumns::of_rows(&rows, |name| {
                column_texts(&columns)
                    .find(|(n, _)| *n == name)
                    .map_or_else(String::new, |(_, t)| t.to_lowercase())
            });
            let job = plugin::OwnedJob {
                table,
                partition,
                grain,
                config,
                input: input_columns,
            };
            let loaded = {
                let limits = limits.clone();
                tokio::task::spawn_blocking(move || host.load(&wasm, &limits).map(|p| (host, p)))
                    .await
                    .context("the plugin task stopped unexpectedly")??
            };
            let plugin = std::sync::Arc::new(loaded.1);
            let (mut first, mut rss_after_first_kib, mut slowest_ms) = (None, 0, 0u64);
            let mut rows = rows;
            for run in 1..=repeat {
                let started = std::time::Instant::now();
                let (input, result) = plugin::run_job_on_thread(
                    std::sync::Arc::clone(&plugin),
                    limits.clone(),
                    job.clone(),
                    rows,
                )
                .await;
                rows = input;
                slowest_ms = slowest_ms.max(started.elapsed().as_millis() as u64);
                let outcome = result.map_err(|e| e.to_string());
                let fingerprint = outcome
                    .as_ref()
                    .map(|o| fingerprint(plugin.description(), o))
                    .map_err(Clone::clone);
                match &first {
                    None => {
                        rss_after_first_kib = weir::procmem::rss_kib(weir::procmem::Process::This);
                        first = Some((fingerprint, outcome));
                    }
                    Some((f, _)) if *f != fingerprint => anyhow::bail!(
                        "run {run} of {repeat} gave a different result than run 1: the plugin is not deterministic"
                    ),
                    Some(_) => {}
                }
            }
            tracing::info!(
                runs = repeat,
                slowest_ms,
                rss_after_first_kib,
                rss_kib = weir::procmem::rss_kib(weir::procmem::Process::This),
                peak_rss_kib = weir::procmem::peak_rss_kib(weir::procmem::Process::This),
                "plugin test runs done"
            );
            let Some((fingerprint_of_job, outcome)) = first else {
                anyhow::bail!("no run");
            };
            let output = outcome.map_err(|e| anyhow::anyhow!(e))?;
            let d = plugin.description();
            // A row plugin's rows are matched to their input rows by a second run that
            // pushes one row per call, in reverse order; it must give what the engine's
            // chunks gave (a plugin keeping state across rows gives other output).
            let rows = std::sync::Arc::new(rows);
            let fates = if d.kind == plugin::Kind::Row {
                let fates = plugin::run_row_by_row_on_thread(
                    std::sync::Arc::clone(&plugin),
                    limits,
                    job,
                    std::sync::Arc::clone(&rows),
                )
                .await?;
                if Ok(fingerprint_of_fates(d, &rows, &fates)) != fingerprint_of_job {
                    anyhow::bail!(
                        "the plugin's output differs when its rows are pushed one per call from \
                         its output when they are pushed in chunks, or last row first: a row \
                         plugin's output must depend only on each row (the engine chunks rows \
                         as it sees fit, and a merge pushes only the rows that changed)"
                    );
                }
                Some(fates)
            } else {
                None
            };
            let preview = Preview {
                d,
                lines: &lines,
                rows: &rows,
                output: &output,
                fates: fates.as_ref(),
                notes: &notes,
            };
            std::io::stdout()
                .lock()
                .write_all(preview.render().as_bytes())?;
            let mut err = std::io::stderr().lock();
            writeln!(err, "{}", preview.summary())?;
            for hint in preview.type_hints(&schema) {
                writeln!(err, "hint: {hint}")?;
            }
            tracing::info!(
                plugin = %d.name,
                sha256 = %plugin.sha256_hex(),
                rows = output.rows.len(),
                rejections = output.rejections.len(),
                fuel = output.fuel,
                peak_memory_bytes = output.peak_memory_bytes,
                compile_ms = plugin.compile_info().millis,
                cache_hit = plugin.compile_info().cache_hit,
                "plugin test done"
            );
            Ok(())
        }
    }
}

/// `weir plugin test WASM --cases FILE`: every case in Weir's host; `ok`/`FAIL` lines
/// on standard output, what a failed case gave and expected, and a count.
async fn run_cases(
    host: weir::plugin::PluginHost,
    wasm: &std::path::Path,
    cases: &std::path::Path,
    grain: weir::partition::Grain,
    limits: weir::plugin::SandboxLimits,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(cases)
        .with_context(|| format!("read cases from {}", cases.display()))?;
    let (wasm, path) = (wasm.to_owned(), cases.display().to_string());
    let stack = weir::plugin::job_thread_stack(&limits);
    // Jobs run on a thread whose stack holds the wasm stack limit.
    let results = tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("weir-plugin-cases".into())
                .stack_size(stack)
                .spawn_scoped(scope, || -> anyhow::Result<_> {
                    let plugin = host.load(&wasm, &limits)?;
                    Ok(weir::plugin::cases::run_cases(
                        &plugin, &limits, grain, &text, &path,
                    )?)
                })
                .map(|t| t.join())
        })
    })
    .await
    .context("the plugin task stopped unexpectedly")?
    .context("start the plugin thread")?
    .map_err(|_| anyhow::anyhow!("the plugin thread stopped unexpectedly"))??;
    let mut out = std::io::stdout();
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    for r in &results {
        match &r.failure {
            None => writeln!(out, "ok   {} (line {})", r.name, r.line)?,
            Some((got, want)) => {
                writeln!(out, "FAIL {} (line {})", r.name, r.line)?;
                for l in got.lines() {
                    writeln!(out, "  got  {}", visible(l))?;
                }
                for l in want.lines() {
                    writeln!(out, "  want {}", visible(l))?;
                }
            }
        }
    }
    writeln!(
        out,
        "{} cases: {} passed, {failed} failed",
        results.len(),
        results.len() - failed
    )?;
    if failed > 0 {
        anyhow::bail!("{failed} of {} cases failed", results.len());
    }
    Ok(())
}

/// `--column` values (`NAME=TYPE`, several per value separated by commas outside
/// parentheses: `id=bigint,amount=numeric(12,2)`; a date or timestamp column's epoch
/// unit after a colon, `seen_at=timestamptz:ms`) as column types and epoch units.
#[allow(clippy::type_complexity)]
fn column_types(
    values: &[String],
) -> anyhow::Result<(
    Vec<(String, weir::value::ColumnType)>,
    Vec<(String, weir::value::EpochUnit)>,
)> {
    let (mut types, mut epochs) = (Vec::new(), Vec::new());
    for value in values {
        for item in column_items(value) {
            let (name, ty) = item.split_once('=').ok_or_else(|| {
                super::usage(format!(
                    "--column `{item}`: write NAME=TYPE (e.g. amount=numeric(12,2))"
                ))
            })?;
            let name = name.trim().to_owned();
            let ty = match ty.split_once(':') {
                Some((ty, unit)) => {
                    let unit = unit
                        .trim()
                        .parse()
                        .map_err(|e| super::usage(format!("--column `{item}`: {e}")))?;
                    epochs.push((name.clone(), unit));
                    ty
                }
                None => ty,
            };
            let ty: weir::value::ColumnType = ty
                .parse()
                .map_err(|e| super::usage(format!("--column `{item}`: {e}")))?;
            if epochs.iter().any(|(n, _)| *n == name) && !ty.is_temporal() {
                return Err(super::usage(format!(
                    "--column `{item}`: an epoch unit is for date, timestamp and timestamptz columns"
                )));
            }
            types.push((name, ty));
        }
    }
    Ok((types, epochs))
}

/// The `NAME=TYPE` items of `--column` values (a comma list; commas inside
/// parentheses, as in `numeric(12,2)`, do not split).
fn column_items(value: &str) -> Vec<&str> {
    let (mut depth, mut start) = (0i32, 0);
    let mut items = Vec::new();
    for (i, c) in value.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&value[start..]);
    items
}

/// The (name, type text) pairs of `--column` values, trimmed (checked by
/// [`column_types`]).
fn column_texts(values: &[String]) -> impl Iterator<Item = (&str, &str)> {
    values
        .iter()
        .flat_map(|v| column_items(v))
        .filter_map(|item| item.split_once('='))
        .map(|(n, t)| (n.trim(), t.split(':').next().unwrap_or(t).trim()))
}

/// What `weir plugin test` prints of a job: each input row's fate in input order.
struct Preview<'a> {
    d: &'a weir::plugin::Description,
    /// The input line of each input row.
    lines: &'a [usize],
    rows: &'a [weir::plugin::InputRow],
    /// The job as the engine runs it (chunks).
    output: &'a weir::plugin::JobOutput,
    /// A row plugin's output per input row.
    fates: Option<&'a weir::plugin::RowFates>,
    /// The input lines that were not pushed, with what became of them.
    notes: &'a [(usize, serde_json::Value)],
}

/// The input rows as the stage would hold them when the job runs: the last version of
/// each key, and no deleted key (a delete removes its row; the engine never pushes
/// one). Returns the rows to push with their lines, in input order of those lines, and
/// a note for each line not pushed: `{"line": N, "superseded": {"by": M}}` or
/// `{"line": N, "deleted": {"key": [...]}}`.
#[allow(clippy::type_complexity)]
fn as_staged(
    rows: Vec<(usize, weir::plugin::InputRow)>,
) -> (
    Vec<(usize, weir::plugin::InputRow)>,
    Vec<(usize, serde_json::Value)>,
) {
    use serde_json::json;
    let mut last: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    let key_of = |row: &weir::plugin::InputRow| -> Vec<u8> {
        serde_json::to_vec(
            &row.key
                .iter()
                .map(weir::plugin::json::tagged)
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default()
    };
    for (i, (_, row)) in rows.iter().enumerate() {
        last.insert(key_of(row), i);
    }
    let mut staged = Vec::new();
    let mut notes = Vec::new();
    for (i, (line, row)) in rows.iter().enumerate() {
        let latest = last.get(&key_of(row)).copied().unwrap_or(i);
        if latest != i {
            notes.push((
                *line,
                json!({ "line": line, "superseded": { "by": rows[latest].0 } }),
            ));
        } else if row.op == weir::feed::Op::Delete {
            let key: Vec<_> = row.key.iter().map(weir::plugin::json::tagged).collect();
            notes.push((*line, json!({ "line": line, "deleted": { "key": key } })));
        }
    }
    for (i, (line, row)) in rows.into_iter().enumerate() {
        if last.get(&key_of(&row)) == Some(&i) && row.op != weir::feed::Op::Delete {
            staged.push((line, row));
        }
    }
    (staged, notes)
}

impl Preview<'_> {
    /// JSON lines: per input row in input order, `{"line": N, "row": {...}}` for each
    /// output row it gave, `{"line": N, "rejection": {...}}` or `{"line": N, "dropped":
    /// {"key": [...]}}`; then the rows `finish` gave (a partition plugin's rows),
    /// `{"row": {...}}`. A partition plugin's input rows show only their rejections.
    fn render(&self) -> String {
        use serde_json::json;
        use weir::plugin::json::{tagged, tagged_row};
        // Each entry with its input line, put in input order at the end (stable: a
        // line's own entries keep their order); then `finish`'s rows.
        let mut entries: Vec<(usize, serde_json::Value)> = self.notes.to_vec();
        let mut line = |j: serde_json::Value| {
            let n = j
                .get("line")
                .and_then(serde_json::Value::as_u64)
                .map_or(usize::MAX, |n| n as usize);
            entries.push((n, j));
        };
        let key =
            |i: usize| -> Vec<serde_json::Value> { self.rows[i].key.iter().map(tagged).collect() };
        let finish_rows = match self.fates {
            Some(fates) => {
                for (i, (rows, rejection)) in fates.per_input.iter().enumerate() {
                    let n = self.lines[i];
                    for row in rows {
                        line(json!({ "line": n, "row": tagged_row(&self.d.columns, row) }));
                    }
                    match rejection {
                        Some(reason) => line(
                            json!({ "line": n, "rejection": { "key": key(i), "reason": reason } }),
                        ),
                        None if rows.is_empty() => {
                            line(json!({ "line": n, "dropped": { "key": key(i) } }))
                        }
                        None => {}
                    }
                }
                &fates.finish
            }
            None => {
                let mut rejections: Vec<_> = self.output.rejections.iter().collect();
                rejections.sort_by_key(|r| r.input);
                for r in rejections {
                    line(json!({
                        "line": self.lines[r.input],
                        "rejection": { "key": key(r.input), "reason": r.reason },
                    }));
                }
                &self.output.rows
            }
        };
        for row in finish_rows {
            line(json!({ "row": tagged_row(&self.d.columns, row) }));
        }
        entries.sort_by_key(|(n, _)| *n);
        let mut out = String::new();
        for (_, j) in entries {
            out.push_str(&j.to_string());
            out.push('\n');
        }
        out
    }

    /// One line for a person: what became of the input.
    fn summary(&self) -> String {
        let n = self.rows.len();
        let rejected = self.output.rejections.len();
        let per_row = self.output.fuel.checked_div(n as u64).unwrap_or(0);
        let used = format!(
            "fuel {} ({per_row} per input row), peak plugin memory {} KiB",
            self.output.fuel,
            self.output.peak_memory_bytes.div_ceil(1024)
        );
        match self.fates {
            Some(fates) => {
                let dropped = fates
                    .per_input
                    .iter()
                    .filter(|(rows, rejection)| rows.is_empty() && rejection.is_none())
                    .count();
                format!(
                    "plugin test: {n} input rows: {} output rows, {rejected} rejected, {dropped} dropped{}; {used}",
                    self.output.rows.len(),
                    self.not_pushed()
                )
            }
            None => format!(
                "plugin test: {n} input rows{}, {rejected} rejected; {} output rows (a partition plugin: rows are not matched to input rows); {used}",
                self.not_pushed(),
                self.output.rows.len()
            ),
        }
    }

    /// What became of the input lines not pushed (none: empty).
    fn not_pushed(&self) -> String {
        let count = |what: &str| {
            self.notes
                .iter()
                .filter(|(_, j)| j.get(what).is_some())
                .count()
        };
        let (superseded, deleted) = (count("superseded"), count("deleted"));
        if superseded + deleted == 0 {
            return String::new();
        }
        format!(
            "; {superseded} superseded by a later line of their key and {deleted} deleted, not pushed"
        )
    }

    /// Hints for rejections that name a column the input gave untyped: the plugin
    /// probably expected a date, timestamp or decimal that plain JSON reads as text or
    /// an integer.
    fn type_hints(&self, schema: &weir::plugin::json::InputSchema) -> Vec<String> {
        let mut hinted: Vec<&str> = Vec::new();
        for r in &self.output.rejections {
            let Some(column) = r
                .reason
                .strip_prefix("column `")
                .and_then(|rest| rest.split_once("` is not "))
                .map(|(column, _)| column)
            else {
                continue;
            };
            let untyped = !schema.types.iter().any(|(c, _)| c == column)
                && self.rows[r.input].columns.iter().any(|(c, _)| c == column);
            if untyped && !hinted.contains(&column) {
                hinted.push(column);
            }
        }
        hinted
            .into_iter()
            .map(|c| {
                format!(
                    "column `{c}` was given without a type, so its plain JSON was read by its \
                     shape (a string as text, a whole number as an integer); if it is a date, a \
                     timestamp or a decimal, say so: --column {c}=date (or timestamp, \
                     numeric(12,2), ...)"
                )
            })
            .collect()
    }
}

/// A job's output rows and rejections, sorted, to compare runs.
fn fingerprint(d: &weir::plugin::Description, output: &weir::plugin::JobOutput) -> Vec<String> {
    fingerprint_of(
        d,
        output.rows.iter(),
        output
            .rejections
            .iter()
            .map(|r| (&r.key[..], r.reason.as_str())),
    )
}

/// The fingerprint of a row-by-row run, comparable to [`fingerprint`]'s.
fn fingerprint_of_fates(
    d: &weir::plugin::Description,
    input: &[weir::plugin::InputRow],
    fates: &weir::plugin::RowFates,
) -> Vec<String> {
    let rows = fates
        .per_input
        .iter()
        .flat_map(|(rows, _)| rows)
        .chain(&fates.finish);
    let rejections = fates
        .per_input
        .iter()
        .zip(input)
        .filter_map(|((_, r), row)| r.as_deref().map(|reason| (&row.key[..], reason)));
    fingerprint_of(d, rows, rejections)
}

fn fingerprint_of<'a>(
    d: &weir::plugin::Description,
    rows: impl Iterator<Item = &'a Vec<weir::value::Value>>,
    rejections: impl Iterator<Item = (&'a [weir::value::Value], &'a str)>,
) -> Vec<String> {
    use weir::plugin::json::{tagged, tagged_row};
    let mut all: Vec<String> = rows
        .map(|row| serde_json::json!({ "row": tagged_row(&d.columns, row) }).to_string())
        .chain(rejections.map(|(key, reason)| {
            let key: Vec<_> = key.iter().map(tagged).collect();
            serde_json::json!({ "rejection": { "key": key, "reason": reason } }).to_string()
        }))
        .collect();
    all.sort_unstable();
    all
}

impl LimitArgs {
    /// The sandbox limits of the flags, the engine's defaults for those not given.
    fn limits(&self) -> weir::plugin::SandboxLimits {
        let mut l = weir::plugin::SandboxLimits::default();
        if let Some(mb) = self.memory_mb {
            l.memory_bytes = mb << 20;
        }
        if let Some(mb) = self.output_mb {
            // In range (at most 4,096 MiB): the shift cannot overflow.
            l.output_bytes_per_call = (mb << 20) as usize;
        }
        if let Some(f) = self.fuel_per_call {
            l.fuel_per_call = f;
        }
        if let Some(f) = self.fuel_per_row {
            l.fuel_per_row = f;
        }
        if let Some(ms) = self.timeout_ms {
            l.timeout_per_call = std::time::Duration::from_millis(ms);
        }
        if let Some(kb) = self.max_stack_kb {
            // In range (at most 65,536 KiB): the shift cannot overflow.
            l.max_stack_bytes = (kb << 10) as usize;
        }
        l
    }
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum PluginCommand {
    /// Run a plugin on sample rows in the sandbox, as the engine runs a partition job;
    /// print each input row's fate in input order as JSON lines (`{"line": N, "row":
    /// {...}}`, `{"line": N, "rejection": {...}}`, `{"line": N, "dropped": {...}}`),
    /// values in the tagged form of plugins/examples/orders-cases.jsonl, and a summary
    /// on standard error.
    Test {
        /// The plugin component (.wasm).
        wasm: PathBuf,
        /// Run the test cases of this file instead (JSON lines, one case each: the
        /// form of plugins/examples/orders-cases.jsonl: partition, config, chunks of
        /// staged rows, and the expected rows and rejections or error); print `ok` or
        /// `FAIL` per case, and fail unless every case passes.
        #[arg(long, conflicts_with_all = ["input", "partition", "repeat"])]
        cases: Option<PathBuf>,
        /// JSON lines, one row each: a Debezium envelope as in a JSON-lines feed
        /// (`{"op": "c", "after": {...}, ...}`), a staged row (`{"key": [...], "op":
        /// "insert", "columns": {...}}`) or just its columns; values plain (typed by
        /// `--column`) or tagged (`{"decimal": "1.50"}`); `-` reads stdin.
        #[arg(long, required_unless_present = "cases")]
        input: Option<PathBuf>,
        /// The partition the rows belong to (e.g. 2026-03-01, or __null__).
        #[arg(long, required_unless_present = "cases")]
        partition: Option<String>,
        /// How the partition column is partitioned.
        #[arg(long, default_value = "day")]
        grain: String,
        /// The table name the plugin is told (it seeds the sandbox's random bytes).
        #[arg(long, default_value = "public.test")]
        table: String,
        /// A plugin config setting; repeat for more.
        #[arg(long = "config-value", short = 'C', value_name = "KEY=VALUE")]
        config_values: Vec<String>,
        /// Key columns of rows that give no `key`.
        #[arg(long, value_delimiter = ',', default_value = "id")]
        key: Vec<String>,
        /// The type of a column given as plain JSON, as in a table's `columns`
        /// (`order_date=date`, `amount=numeric(12,2)`); repeat, or separate with commas.
        /// Its values are read as the JSON-lines feed reads them. Untyped columns are
        /// read by their JSON shape.
        #[arg(long = "column", value_name = "NAME=TYPE")]
        columns: Vec<String>,
        /// Run the job this many times in this process, each in a fresh instance as the
        /// engine does; fail if any run's output or error differs from the first. The
        /// closing log line reports the resident memory after the first run and at the
        /// end, and the slowest run.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Write a ready plugin project: source, build.sh, test cases, sample rows, a
    /// README, and Weir's SDK and contract vendored. It builds and passes its cases as
    /// written.
    New {
        /// The plugin's name: lower-case letters, digits and `-` (e.g. pii-mask).
        name: String,
        /// The language.
        #[arg(long)]
        lang: super::plugin_new::Lang,
        /// Where to write it (default: ./NAME); must not exist or be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a project `plugin new` wrote: run its build.sh (which installs its pinned
    /// toolchain if missing), then load the component and print what it declares.
    Build {
        /// The project folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Print a plugin's name, version, kind, output schema, sha256 and imports.
    Inspect {
        /// The plugin component (.wasm).
        wasm: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Sandbox limits, as in a table's config (defaults: the engine's).
#[derive(Debug, clap::Args)]
pub(crate) struct LimitArgs {
    /// Memory cap per instance (all its memories and tables), MiB (16 to 4096, as
    /// `plugin_memory_mb`).
    #[arg(long, value_parser = in_range(weir::plugin::MEMORY_MB_RANGE))]
    pub(crate) memory_mb: Option<u64>,
    /// What one call may hand the engine, MiB (1 to 4096, as `plugin_output_mb`).
    #[arg(long, value_parser = in_range(weir::plugin::OUTPUT_MB_RANGE))]
    pub(crate) output_mb: Option<u64>,
    /// CPU budget per call, in fuel units (at least 1,000,000, as `plugin_fuel_per_call`).
    #[arg(long, value_parser = in_range(weir::plugin::FUEL_PER_CALL_RANGE))]
    pub(crate) fuel_per_call: Option<u64>,
    /// CPU budget per row a call handles, added to the call's (0 to 10^12, as
    /// `plugin_fuel_per_row`).
    #[arg(long, value_parser = in_range(weir::plugin::FUEL_PER_ROW_RANGE))]
    pub(crate) fuel_per_row: Option<u64>,
    /// Wall-clock backstop per call, ms (10 to 3,600,000, as `plugin_timeout_ms`).
    #[arg(long, value_parser = in_range(weir::plugin::TIMEOUT_MS_RANGE))]
    pub(crate) timeout_ms: Option<u64>,
    /// Maximum wasm stack, KiB (64 to 65,536, as `plugin_max_stack_kb`).
    #[arg(long, value_parser = in_range(weir::plugin::MAX_STACK_KB_RANGE))]
    pub(crate) max_stack_kb: Option<u64>,
}

/// A parser of a `plugin test` limit flag: the same range as the config key, so a
/// value that would wrap (`--memory-mb 18014398509481984` shifted to bytes) or starve
/// the sandbox is refused with the range instead.
fn in_range(range: std::ops::RangeInclusive<u64>) -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(range)
}

/// A line of JSON with the characters a terminal does not show (a byte-order mark,
/// zero-width and bidirectional marks, line separators) written as JSON escapes, so
/// that a `got` and a `want` that differ only by one do not look the same.
fn visible(line: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2028}' | '\u{2029}' | '\u{2060}'..='\u{2064}' | '\u{feff}');
    if !line.chars().any(hidden) {
        return line.into();
    }
    line.chars()
        .map(|c| {
            if hidden(c) {
                format!("\\u{:04x}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn invisible_characters_are_escaped() {
        assert_eq!(super::visible(r#"{"a":"x"}"#), r#"{"a":"x"}"#);
        assert_eq!(
            super::visible("{\"a\":\"\u{feff}x\u{200b}\"}"),
            r#"{"a":"\ufeffx\u200b"}"#
        );
    }
}
