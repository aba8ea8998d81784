//! The plugin test cases shared by every language (`plugins/examples/orders-cases.jsonl`
//! is one such file), run in Weir's own host: `weir plugin test WASM --cases FILE`.
//!
//! A case file is JSON lines; each line is one case:
//!
//! ```json
//! {"case": "a name",
//!  "partition": {"table": "public.orders", "name": "2026-03-01"},
//!  "config": {"rate": "1.0825"},
//!  "chunks": [[STAGED_ROW, ...], ...],
//!  "expect": {"rows": [{"COLUMN": VALUE, ...}, ...],
//!             "rejections": [{"key": [VALUE, ...], "reason": "..."}]}}
//! ```
//!
//! or `"expect": {"error": {"invalid-config": "..."}}` (also `invalid-input`, `other`)
//! when the job must fail. A job is run as the engine runs one: a fresh instance, the
//! session constructed with the partition and the config, one `push` per chunk, then
//! `finish`, every output row checked and its decimals padded to their column's scale.
//! Its rows, and its rejections, each in the order the calls returned them, must be the
//! expected ones exactly (the rows by column name, in the declared column order). The staged
//! rows and values are those of `weir plugin test` (see [`super::json`]).

use serde_json::{Map, Value as J, json};

use super::json::{InputSchema, read_input_rows, tagged, tagged_row};
use super::{JobSpec, KeyIndex, OutputCheck, Plugin, PluginError, SandboxLimits};
use crate::partition::{Grain, Partition};

/// A case file that cannot be run.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct CaseError {
    pub path: String,
    pub line: usize,
    pub message: String,
}

/// What one case gave.
#[derive(Debug)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// The case's line in its file.
    pub line: usize,
    /// `None`: passed; else what was given and what was expected, as JSON lines.
    pub failure: Option<(String, String)>,
}

/// Runs every case of `text` (the contents of the file at `path`) against `plugin`.
/// A case whose job fails other than with the plugin's own `error` (a trap, a budget,
/// an output check) fails with that error as what it gave.
pub fn run_cases(
    plugin: &Plugin,
    limits: &SandboxLimits,
    grain: Grain,
    text: &str,
    path: &str,
) -> Result<Vec<CaseResult>, CaseError> {
    let mut results = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| CaseError {
            path: path.to_owned(),
            line: n + 1,
            message,
        };
        let case: J = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let name = case["case"].as_str().unwrap_or("(unnamed)").to_owned();
        let want = expected(plugin, &case).map_err(&bad)?;
        let got = run_case(plugin, limits, grain, &case).map_err(&bad)?;
        results.push(CaseResult {
            name,
            line: n + 1,
            failure: (got != want).then_some((got, want)),
        });
    }
    if results.is_empty() {
        return Err(CaseError {
            path: path.to_owned(),
            line: 0,
            message: "no cases (a case is one JSON line; see `weir plugin test --help`)".into(),
        });
    }
    Ok(results)
}

/// What a case's job gave, as JSON lines: `{"row": ...}` and `{"rejection": ...}` in
/// the order the calls returned them, or `{"error": {"KIND": "message"}}`.
fn run_case(
    plugin: &Plugin,
    limits: &SandboxLimits,
    grain: Grain,
    case: &J,
) -> Result<String, String> {
    let text = |j: &J, field: &str| -> Result<String, String> {
        j.get(field)
            .and_then(J::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("`{field}` must be text"))
    };
    let table = text(&case["partition"], "table")?;
    let partition = Partition::from_name(&text(&case["partition"], "name")?);
    let config: Vec<(String, String)> = match &case["config"] {
        J::Null => Vec::new(),
        J::Object(map) => map
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|v| (k.clone(), v.to_owned()))
                    .ok_or_else(|| format!("config `{k}` must be text"))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("`config` must be an object of text values".into()),
    };
    let config = super::normalize_config(&config);
    let mut chunks = Vec::new();
    for chunk in case["chunks"]
        .as_array()
        .ok_or("`chunks` must be a list of lists")?
    {
        let rows: String = chunk
            .as_array()
            .ok_or("each chunk must be a list of staged rows")?
            .iter()
            .map(|r| format!("{r}\n"))
            .collect();
        let rows = read_input_rows(&rows, "chunk", &InputSchema::default())
            .map_err(|e| format!("a staged row of a chunk: {}", e.message))?;
        chunks.push(rows.into_iter().map(|(_, r)| r).collect::<Vec<_>>());
    }
    let all: Vec<super::InputRow> = chunks.iter().flatten().cloned().collect();
    let input = super::InputColumns::of_rows(&all, |_| String::new());
    let spec = JobSpec {
        table: &table,
        partition: &partition,
        grain,
        config: &config,
        input: &input,
    };
    Ok(match job_lines(plugin, limits, &spec, &chunks) {
        Ok(lines) => lines,
        Err(PluginError::Guest { kind, message, .. }) => {
            let kind = match kind {
                "invalid config" => "invalid-config",
                "invalid input" => "invalid-input",
                _ => "other",
            };
            format!("{}\n", json!({ "error": { kind: message } }))
        }
        Err(other) => format!("{}\n", json!({ "error": { "job": other.to_string() } })),
    })
}

/// Runs a job one push per chunk; its output as JSON lines: the rows, then the
/// rejections, each in the order the calls returned them.
fn job_lines(
    plugin: &Plugin,
    limits: &SandboxLimits,
    spec: &JobSpec<'_>,
    chunks: &[Vec<super::InputRow>],
) -> Result<String, PluginError> {
    let mut session =
        plugin.start_job(limits, spec, super::job::clock_of(chunks.iter().flatten()))?;
    let mut check = OutputCheck::new(plugin, session.job(), spec);
    let columns = &plugin.description().columns;
    let (mut rows_text, mut rejections_text) = (String::new(), String::new());
    let (mut keys, mut pushed) = (KeyIndex::default(), Vec::new());
    let mut take = |call: super::CallOutput, pushed: &[super::InputRow]| {
        let mut rows = call.rows;
        check.check(&mut rows)?;
        for row in &rows {
            rows_text.push_str(&json!({ "row": tagged_row(columns, row) }).to_string());
            rows_text.push('\n');
        }
        for (key, reason) in call.rejections {
            if keys.find(&key, pushed).is_none() {
                return Err(check.not_pushed(&key));
            }
            let key: Vec<J> = key.iter().map(tagged).collect();
            rejections_text
                .push_str(&json!({ "rejection": { "key": key, "reason": reason } }).to_string());
            rejections_text.push('\n');
        }
        Ok::<_, PluginError>(())
    };
    for chunk in chunks {
        let call = session.push_whole(chunk)?;
        pushed.extend_from_slice(chunk);
        take(call, &pushed)?;
    }
    let call = session.finish_whole()?;
    take(call, &pushed)?;
    rows_text.push_str(&rejections_text);
    Ok(rows_text)
}

/// A case's expected output, rendered as [`run_case`] renders what a job gave.
fn expected(plugin: &Plugin, case: &J) -> Result<String, String> {
    let expect = &case["expect"];
    if let Some(error) = expect.get("error") {
        return Ok(format!("{}\n", json!({ "error": error })));
    }
    let columns = &plugin.description().columns;
    let mut out = String::new();
    let list = |field: &str| {
        expect
            .get(field)
            .and_then(J::as_array)
            .ok_or_else(|| format!("`expect` needs `{field}` (a list) or `error`"))
    };
    for row in list("rows")? {
        let J::Object(row) = row else {
            return Err("an expected row must be an object of column: value".into());
        };
        if let Some(extra) = row.keys().find(|k| !columns.iter().any(|c| &c.name == *k)) {
            return Err(format!(
                "an expected row has column `{extra}`, which the plugin does not declare"
            ));
        }
        let ordered: Map<String, J> = columns
            .iter()
            .map(|c| (c.name.clone(), row.get(&c.name).cloned().unwrap_or(J::Null)))
            .collect();
        out.push_str(&json!({ "row": ordered }).to_string());
        out.push('\n');
    }
    for r in list("rejections")? {
        out.push_str(
            &json!({ "rejection": { "key": r["key"], "reason": r["reason"] } }).to_string(),
        );
        out.push('\n');
    }
    Ok(out)
}
