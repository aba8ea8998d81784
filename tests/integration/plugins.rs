//! WebAssembly transform plugins: the shared cases in every language, plugins in a
//! pipeline (output, rejections, lineage), the partition check, and the hostile plugins
//! against the sandbox, through the `weir` binary and against real PostgreSQL.
//!
//! The components come from `scripts/build-plugins` (which `scripts/test` runs first)
//! in `$WEIR_PLUGINS_DIR` (default `$CARGO_TARGET_DIR/plugins`, else
//! `~/.cache/weir-target/plugins`).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value as J, json};
use sha2::{Digest, Sha256};
use weir::partition::Grain;
use weir::plugin::{PluginHost, SandboxLimits};
use weir::procmem::{self, Process};

use crate::harness::{TestDb, text};

/// The orders plugin in every language; all must agree byte for byte.
const ORDERS_PLUGINS: [&str; 5] = [
    "orders-rust",
    "orders-python",
    "orders-js",
    "orders-c",
    "orders-cpp",
];

/// The same orders sources built on contract 0.1, which the host still runs.
const ORDERS_PLUGINS_0_1: [&str; 5] = [
    "orders-rust-0-1",
    "orders-python-0-1",
    "orders-js-0-1",
    "orders-c-0-1",
    "orders-cpp-0-1",
];

pub fn plugins_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_PLUGINS_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/weir-target"),
        PathBuf::from,
    );
    target.join("plugins")
}

/// The path of a built component; fails the test (never skips it) when it is missing.
pub fn plugin(name: &str) -> PathBuf {
    let path = plugins_dir().join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the plugins with `scripts/build-plugins {}` (scripts/test does)",
        path.display(),
        plugins_dir().display()
    );
    path
}

fn sha256_file(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("read plugin")))
}

const ORDERS_CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../plugins/examples/orders-cases.jsonl"
);

/// A JavaScript plugin's job passes or fails by its rows, not by how many there are:
/// a partition of 12,288 orders with 8 KiB customers (98 MB of input, three chunks of
/// 4,096 rows) passes with the default limits, at about the fuel per row of a job of
/// 1,024 of the same rows. Built by ComponentizeJS 0.22.0 as it generates bindings,
/// the same plugin failed even the job of 1,024 rows ("CPU budget exceeded": its
/// bindings made an object of every character of every output string), and never
/// freed the strings it was given, so that a job of 98,304 ordinary orders trapped.
#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_plugins_cost_per_row_does_not_grow_with_its_partition() {
    use std::sync::Arc;
    use weir::partition::{Partition, partition_of};
    use weir::plugin::{InputColumns, InputRow, OwnedJob, run_job_on_thread};
    use weir::source::Op;
    use weir::value::Value;
    use weir_core::fixtures::ORDERS_COLUMN_TYPES;

    let date = 20_513; // 2026-03-01
    let rows = |n: i64| -> Vec<InputRow> {
        (1..=n)
            .map(|id| InputRow {
                key: vec![Value::Int(id)],
                op: Op::Insert,
                commit_position: id as u64,
                commit_time: None,
                columns: vec![
                    ("id".to_owned(), Value::Int(id)),
                    ("customer".to_owned(), Value::Text(format!("{id:>8192}"))),
                    ("order_date".to_owned(), Value::Date(date)),
                    (
                        "amount".to_owned(),
                        Value::Decimal(format!("{}.25", id % 1000)),
                    ),
                    ("status".to_owned(), Value::Text("paid".to_owned())),
                ],
            })
            .collect()
    };
    let partition: Partition =
        partition_of("order_date", Grain::Day, &Value::Date(date)).expect("partition");
    let job = OwnedJob {
        table: "public.orders".to_owned(),
        partition,
        grain: Grain::Day,
        config: vec![("rate".to_owned(), "1.0825".to_owned())],
        input: InputColumns::new(
            ORDERS_COLUMN_TYPES
                .into_iter()
                .map(|(n, t)| (n.to_owned(), t.to_owned()))
                .collect(),
            &["id".to_owned()],
        ),
    };
    let host = PluginHost::new(PluginHost::default_cache_dir());
    let js = Arc::new(
        host.load(&plugin("orders-js"), &SandboxLimits::default())
            .expect("load orders-js"),
    );
    let mut fuel_per_row = Vec::new();
    for n in [1_024, 12_288] {
        let (_, result) = run_job_on_thread(
            Arc::clone(&js),
            SandboxLimits::default(),
            job.clone(),
            rows(n),
        )
        .await;
        let output = result.unwrap_or_else(|e| panic!("a job of {n} rows: {e}"));
        assert_eq!(output.rows.len(), n as usize, "every row comes out");
        assert!(output.rejections.is_empty());
        fuel_per_row.push(output.fuel as f64 / n as f64);
    }
    assert!(
        fuel_per_row[1] < fuel_per_row[0] * 1.5,
        "fuel per row grew with the job: {fuel_per_row:?}"
    );
}

/// The shared cases pass in every language's component in Weir's own host (the
/// engine's case runner, as `weir plugin test --cases` runs it), so their outputs are
/// identical byte for byte; and the command says which case failed and why.
#[test]
fn the_orders_cases_pass_in_every_language_with_identical_bytes() {
    let cases = std::fs::read_to_string(ORDERS_CASES).expect("read orders cases");
    let host = PluginHost::new(PluginHost::default_cache_dir());
    let contracts = ORDERS_PLUGINS
        .iter()
        .map(|n| (n, "0.2.0"))
        .chain(ORDERS_PLUGINS_0_1.iter().map(|n| (n, "0.1.0")));
    for (name, contract) in contracts {
        let p = host
            .load(&plugin(name), &SandboxLimits::default())
            .unwrap_or_else(|e| panic!("load {name}: {e}"));
        assert_eq!(p.contract(), contract, "{name}");
        let d = p.description();
        assert_eq!(
            (d.name.as_str(), d.partition_column.as_str()),
            ("orders", "order_date")
        );
        let results = weir::plugin::cases::run_cases(
            &p,
            &SandboxLimits::default(),
            Grain::Day,
            &cases,
            "orders-cases.jsonl",
        )
        .expect("cases run");
        assert!(results.len() >= 30, "the shared cases are all there");
        let failures: Vec<String> = results
            .iter()
            .filter_map(|r| {
                let (got, want) = r.failure.as_ref()?;
                Some(format!(
                    "{name}: case {}:\n  got  {got}\n  want {want}",
                    r.name
                ))
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    // From the command line: one changed expectation fails its case, exit 1.
    let first = cases.lines().next().expect("a case");
    assert!(first.contains("\"108.25\""), "{first}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("cases.jsonl");
    std::fs::write(
        &bad,
        format!("{}\n{}\n", first.replace("\"108.25\"", "\"108.26\""), first),
    )
    .expect("write cases");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "test"])
        .arg(plugin("orders-rust"))
        .arg("--cases")
        .arg(&bad)
        .output()
        .expect("run weir plugin test --cases");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL converts amount at the configured rate, exact (line 1)")
            && stdout.contains("ok   converts amount at the configured rate, exact (line 2)")
            && stdout.contains("2 cases: 1 passed, 1 failed"),
        "{stdout}"
    );
}

/// One Debezium line for `table` (an orders-shaped row).
pub(crate) fn line(
    table: &str,
    op: &str,
    id: i64,
    day: &str,
    amount: &str,
    status: &str,
) -> String {
    let after = json!({"id": id, "customer": format!("c{}", id % 7), "order_date": day, "amount": amount, "status": status});
    let l = json!({
        "op": op,
        "before": null,
        "after": after,
        "source": {"schema": "public", "table": table, "ts_ms": 1_772_323_200_000u64},
        "ts_ms": 1_772_323_200_000u64,
    });
    format!("{l}\n")
}

pub(crate) fn orders_table(source: &str, target: &str, plugin_path: &Path, extra: &str) -> String {
    crate::harness::orders_table(
        source,
        target,
        &format!("plugin = \"{}\"\n{extra}", plugin_path.display()),
    )
}

fn write_config(db: &TestDb, tables: &str) {
    db.write_feed_config("", "flush_interval_ms = 100", tables);
}

/// 60 orders over three days; every 20th has a negative amount.
fn orders_feed() -> Vec<String> {
    (1..=60)
        .map(|id| {
            let day = format!("2026-03-0{}", 1 + id % 3);
            let amount = if id % 20 == 0 {
                format!("-{id}.50")
            } else {
                format!("{}.{:02}", id * 3, id % 100)
            };
            line(
                "orders",
                "c",
                id,
                &day,
                &amount,
                if id % 2 == 0 { "new" } else { "Shipped" },
            )
        })
        .collect()
}

async fn target_text(db: &TestDb, table: &str) -> Vec<String> {
    db.client()
        .await
        .query(&format!("SELECT t::text FROM {table} t ORDER BY id"), &[])
        .await
        .expect("read target")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_writes_plugin_output_with_rejections_and_lineage_identically_in_every_language()
{
    let mut contents = Vec::new();
    for name in ORDERS_PLUGINS {
        let db = TestDb::new(&format!("plugin_e2e_{}", name.replace('-', "_"))).await;
        let wasm = plugin(name);
        write_config(
            &db,
            &orders_table(
                "public.orders",
                "analytics.orders_eur",
                &wasm,
                "[table.plugin_config]\nrate = \"1.0825\"\n",
            ),
        );
        db.write_feed(&orders_feed());
        let init = db.weir_ok(&["init"]);
        assert!(init.contains("transform orders@"), "{init}");
        let out = db.weir_ok(&["run", "--once"]);
        assert!(out.contains("3 rows rejected by plugins"), "{out}");
        // `weir verify` runs the plugin again on the staged rows and finds the target
        // equal to its output, in every language.
        let verify: J = serde_json::from_str(&db.weir_ok(&[
            "verify",
            "--table",
            "public.orders",
            "--from",
            "2026-03-01",
            "--to",
            "2026-03-04",
            "--json",
        ]))
        .expect("verify json");
        let partitions = verify.as_array().expect("one entry per partition");
        assert_eq!(partitions.len(), 3, "{name}: {verify}");
        assert!(
            partitions.iter().all(|p| p["ok"] == true),
            "{name}: {verify}"
        );
        let client = db.client().await;

        // The target has the plugin's declared columns and types.
        let columns: Vec<(String, String)> = client
            .query(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = 'analytics.orders_eur'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                &[],
            )
            .await
            .expect("columns")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            columns,
            [
                ("id", "bigint"),
                ("customer", "text"),
                ("order_date", "date"),
                ("amount", "numeric(12,2)"),
                ("amount_eur", "numeric(14,2)"),
                ("status", "text")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        let row = client
            .query_one(
                "SELECT amount::text, amount_eur::text, status FROM analytics.orders_eur WHERE id = 3",
                &[],
            )
            .await
            .expect("order 3");
        // 9.03 × 1.0825 = 9.774975, to 9.77.
        assert_eq!(
            (
                row.get::<_, String>(0),
                row.get::<_, String>(1),
                row.get::<_, String>(2)
            ),
            ("9.03".into(), "9.77".into(), "SHIPPED".into())
        );
        let count: i64 = db.count("SELECT count(*) FROM analytics.orders_eur").await;
        assert_eq!(count, 57, "60 orders, 3 rejected");

        // Rejections: in the dead-letter table with key, reason, input and plugin sha256.
        let sha = sha256_file(&wasm);
        let rejected = client
            .query(
                "SELECT row_key::text, reason, input->>'amount', plugin_sha256, partition, source_table \
                 FROM weir.dead_letter WHERE kind = 'rejected' ORDER BY row_key::text",
                &[],
            )
            .await
            .expect("dead letters");
        let rejected: Vec<(String, String, String, String, String, String)> = rejected
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
            .collect();
        assert_eq!(rejected.len(), 3, "{rejected:?}");
        assert_eq!(
            rejected[0],
            (
                "[20]".to_owned(),
                "amount is negative".to_owned(),
                "-20.50".to_owned(),
                sha.clone(),
                "2026-03-03".to_owned(),
                "public.orders".to_owned()
            )
        );

        // Lineage: the plugin's sha256 and the config's hash on every partition.
        let lineage = client
            .query(
                "SELECT partition, transform, plugin_sha256, config_hash FROM weir.partitions ORDER BY partition",
                &[],
            )
            .await
            .expect("lineage");
        assert_eq!(lineage.len(), 3);
        let config_hash: String = lineage[0].get(3);
        for l in &lineage {
            assert_eq!(l.get::<_, String>(1), "orders@0.1.0");
            assert_eq!(l.get::<_, String>(2), sha);
            assert_eq!(l.get::<_, String>(3), config_hash);
        }

        // Running again writes nothing and leaves the dead letters as they are.
        let again = db.weir_ok(&["run", "--once"]);
        assert!(again.contains("wrote 0 partitions"), "{again}");
        contents.push((name, target_text(&db, "analytics.orders_eur").await));

        if name == "orders-rust" {
            lineage_follows_config_and_bytes(&db, &config_hash, &sha).await;
            a_rejection_fails_the_partition_with_on_reject_fail(&db).await;
        }
    }
    for (name, rows) in &contents[1..] {
        assert_eq!(
            rows, &contents[0].1,
            "target contents of {name} and {} differ",
            contents[0].0
        );
    }
}

/// Changing the config, then the plugin's bytes, changes the lineage of the partitions
/// written after.
async fn lineage_follows_config_and_bytes(db: &TestDb, config_hash: &str, sha: &str) {
    let client = db.client().await;
    let lineage_of = |day: &'static str| {
        let client = &client;
        async move {
            let r = client
                .query_one(
                    "SELECT plugin_sha256, config_hash FROM weir.partitions WHERE partition = $1",
                    &[&day],
                )
                .await
                .expect("lineage row");
            (r.get::<_, String>(0), r.get::<_, String>(1))
        }
    };
    write_config(
        db,
        &orders_table(
            "public.orders",
            "analytics.orders_eur",
            &plugin("orders-rust"),
            "[table.plugin_config]\nrate = \"2\"\n",
        ),
    );
    db.append_feed(&[line("orders", "c", 1000, "2026-03-01", "1.00", "new")]);
    db.weir_ok(&["run", "--once"]);
    let (new_sha, new_hash) = lineage_of("2026-03-01").await;
    assert_eq!(new_sha, sha);
    assert_ne!(new_hash, config_hash, "a new config, a new config hash");
    assert_eq!(lineage_of("2026-03-02").await.1, config_hash, "untouched");
    let eur: String = client
        .query_one(
            "SELECT amount_eur::text FROM analytics.orders_eur WHERE id = 1000",
            &[],
        )
        .await
        .expect("order 1000")
        .get(0);
    assert_eq!(eur, "2.00");

    // The same logic in other bytes (the Python build): a new sha256, same config hash.
    write_config(
        db,
        &orders_table(
            "public.orders",
            "analytics.orders_eur",
            &plugin("orders-python"),
            "[table.plugin_config]\nrate = \"2\"\n",
        ),
    );
    db.append_feed(&[line("orders", "c", 1001, "2026-03-01", "1.00", "new")]);
    db.weir_ok(&["run", "--once"]);
    let (py_sha, py_hash) = lineage_of("2026-03-01").await;
    assert_eq!(py_sha, sha256_file(&plugin("orders-python")));
    assert_ne!(py_sha, sha);
    assert_eq!(py_hash, new_hash);
}

/// With `on_reject = "fail"`, a partition holding a rejected row fails, names the key
/// and the reason, and is not written; the other partitions are.
async fn a_rejection_fails_the_partition_with_on_reject_fail(db: &TestDb) {
    write_config(
        db,
        &orders_table(
            "public.orders",
            "analytics.orders_eur",
            &plugin("orders-rust"),
            "on_reject = \"fail\"\n[table.plugin_config]\nrate = \"2\"\n",
        ),
    );
    // Two new days: the partitions of the earlier (dead-lettered) rejections stay clean.
    db.append_feed(&[
        line("orders", "c", 2000, "2026-03-05", "-1.00", "new"),
        line("orders", "c", 1999, "2026-03-05", "1.00", "new"),
        line("orders", "c", 2001, "2026-03-06", "1.00", "new"),
    ]);
    let out = db.weir(&["run", "--once"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("rejected the row with key [2000]: amount is negative"),
        "{stderr}"
    );
    let failed: i64 = db
        .count("SELECT count(*) FROM analytics.orders_eur WHERE order_date = '2026-03-05'")
        .await;
    assert_eq!(failed, 0, "the failed partition is not written");
    let other: i64 = db
        .count("SELECT count(*) FROM analytics.orders_eur WHERE id = 2001")
        .await;
    assert_eq!(other, 1, "the other partition is written");
    // The failed run still says what it did before it stopped.
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("stopped by an error after staging 3 changes and writing 1 rows"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_of_another_partition_fails_its_job_and_leaves_the_target_untouched() {
    let db = TestDb::new("plugin_wrong_partition").await;
    // The stage partitions by `ship_date`; the plugin's partition column is its
    // `order_date` (copied from the input): a row shipped on another day than ordered
    // lands in a job whose partition its output does not belong to.
    let table = format!(
        r#"
[[table]]
source = "public.orders"
target = "analytics.orders_eur"
key = ["id"]
partition_by = "ship_date"
grain = "day"
columns = {{ id = "bigint", customer = "text", order_date = "date", ship_date = "date", amount = "numeric(12,2)", status = "text" }}
plugin = "{}"
[table.plugin_config]
rate = "1"
"#,
        plugin("orders-rust").display()
    );
    write_config(&db, &table);
    let with_ship = |id: i64, ordered: &str, shipped: &str| {
        line("orders", "c", id, ordered, "1.00", "new").replace(
            "\"order_date\":",
            &format!("\"ship_date\":\"{shipped}\",\"order_date\":"),
        )
    };
    db.write_feed(&[
        with_ship(1, "2026-03-01", "2026-03-01"),
        with_ship(7, "2026-03-03", "2026-03-02"),
    ]);
    db.weir_ok(&["init"]);
    let out = db.weir(&["run", "--once"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("belongs to partition `2026-03-03`, not `2026-03-02` (row id = 7)"),
        "{stderr}"
    );
    let client = db.client().await;
    let ids: Vec<i64> = client
        .query("SELECT id FROM analytics.orders_eur ORDER BY id", &[])
        .await
        .expect("ids")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1], "only the good partition is written");
    let written: Vec<String> = client
        .query("SELECT partition FROM weir.partitions ORDER BY 1", &[])
        .await
        .expect("lineage")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(written, ["2026-03-01"]);
    // `status` shows the failed partition and why, until it is written.
    let status: J = serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
    let failed = status["failed_partitions"].as_array().expect("failed");
    assert_eq!(failed.len(), 1, "{status}");
    assert_eq!(failed[0]["partition"], "2026-03-02");
    assert!(
        failed[0]["error"]
            .as_str()
            .expect("error")
            .contains("belongs to partition `2026-03-03`"),
        "{status}"
    );
    // Shipped the same day after all: the partition is written and the failure gone.
    db.append_feed(&[with_ship(7, "2026-03-02", "2026-03-02")]);
    db.weir_ok(&["run", "--once"]);
    let status: J = serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
    assert_eq!(status["failed_partitions"], json!([]), "{status}");
}

/// `weir plugin test` as a child process, with JSON logs; returns (exit code, stdout,
/// the closing `plugin test runs done` fields, stderr).
fn plugin_test(wasm: &Path, input: &str, args: &[&str]) -> (Option<i32>, String, J, String) {
    plugin_test_in(wasm, input, "2026-03-01", args)
}

fn plugin_test_in(
    wasm: &Path,
    input: &str,
    partition: &str,
    args: &[&str],
) -> (Option<i32>, String, J, String) {
    plugin_test_cached(wasm, input, partition, args, None)
}

/// `plugin_test_in` with compiled plugins cached in `cache` (default: a fresh folder),
/// so that a large component (Python's) is compiled once for many runs.
fn plugin_test_cached(
    wasm: &Path,
    input: &str,
    partition: &str,
    args: &[&str],
    cache: Option<PathBuf>,
) -> (Option<i32>, String, J, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = cache.unwrap_or_else(|| dir.path().join("cache"));
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, input).expect("write rows");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--log-format", "json", "plugin", "test"])
        .arg(wasm)
        .arg("--input")
        .arg(&rows)
        .args(["--partition", partition])
        .args(args)
        .env("RUST_LOG", "info")
        .env("WEIR_PLUGIN_CACHE", cache)
        .output()
        .expect("run weir plugin test");
    let stderr = text(&out.stderr);
    let summary = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<J>(l).ok())
        .find(|j| j["fields"]["message"] == "plugin test runs done")
        .map(|j| j["fields"].clone())
        .unwrap_or(J::Null);
    (out.status.code(), text(&out.stdout), summary, stderr)
}

const ONE_ROW: &str = "{\"key\":[{\"integer\":1}],\"commit_time\":1772323200000000,\"columns\":{\"id\":{\"integer\":1},\"order_date\":{\"date\":20513}}}\n";

#[test]
fn hostile_plugins_hit_the_sandbox_limits_with_clear_errors() {
    // An endless loop: the wall-clock backstop ends it within its budget plus 100 ms…
    let (code, _, summary, stderr) =
        plugin_test(&plugin("hostile-loop"), ONE_ROW, &["--timeout-ms", "500"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("CPU budget exceeded") && stderr.contains("500 ms"),
        "{stderr}"
    );
    let ms = summary["slowest_ms"].as_u64().expect("slowest_ms");
    assert!(ms < 600, "the loop ran {ms} ms against a 500 ms budget");
    // …and fuel ends it deterministically.
    let (code, _, _, stderr) = plugin_test(
        &plugin("hostile-loop"),
        ONE_ROW,
        &["--fuel-per-call", "50000000", "--fuel-per-row", "7"],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("CPU budget exceeded: the call used its 50000007 units of fuel (50000000 for the call and 7 for each of its 1 rows"),
        "{stderr}"
    );

    // 4 GiB in 64 MiB blocks: the fourth block passes the 256 MiB cap and traps.
    let (code, _, summary, stderr) = plugin_test(&plugin("hostile-alloc"), ONE_ROW, &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("memory cap exceeded") && stderr.contains("the cap is 268435456 bytes"),
        "{stderr}"
    );
    let peak = summary["peak_rss_kib"].as_u64().expect("peak");
    assert!(
        peak < (256 + 25) * 1024 + 64 * 1024,
        "peak RSS {peak} KiB: the cap plus 10% over a base of at most 64 MiB"
    );

    // Unbounded recursion: a wasm stack overflow trap, not a crashed process.
    let (code, _, _, stderr) = plugin_test(&plugin("hostile-recursion"), ONE_ROW, &[]);
    assert_eq!(code, Some(1), "the process exits normally: {stderr}");
    assert!(stderr.contains("wasm stack overflow"), "{stderr}");

    // 25 MiB of valid rows in one call, within the memory cap: the output cap ends the
    // call while its output is copied out, and names the setting…
    let (code, _, _, stderr) =
        plugin_test(&plugin("hostile-output"), ONE_ROW, &["--output-mb", "16"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("output cap exceeded")
            && stderr.contains("more than 16777216 bytes (`plugin_output_mb`)"),
        "{stderr}"
    );
    // …and it is the cap alone that stops it: under a larger one the same call passes.
    let (code, out, _, stderr) =
        plugin_test(&plugin("hostile-output"), ONE_ROW, &["--output-mb", "64"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(out.lines().count(), 100, "100 rows of 256 KiB");

    // Unbounded recursion in `describe`, with a wasm stack (16 MiB) larger than a
    // runtime thread's: `describe` runs on a thread sized for it, so the load fails
    // with a wasm stack overflow instead of overflowing the host's stack.
    for stack in [vec![], vec!["--max-stack-kb", "16384"]] {
        let (code, _, _, stderr) = plugin_test(&plugin("hostile-deep-describe"), ONE_ROW, &stack);
        assert_eq!(
            code,
            Some(2),
            "the process exits normally, the plugin refused as unusable ({stack:?}): {stderr}"
        );
        assert!(
            stderr.contains("`describe` failed") && stderr.contains("wasm stack overflow"),
            "{stack:?}: {stderr}"
        );
    }

    // Components no guest language makes (plugins/hostile/wat/generate.py). Fifteen
    // memories of 20 MiB, each far under the cap, and a table of 40 million elements:
    // the instance's one cap for memories and tables together ends both.
    for name in ["hostile-memories", "hostile-table"] {
        let (code, _, summary, stderr) = plugin_test(&plugin(name), ONE_ROW, &[]);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("memory cap exceeded: the plugin's memories and tables would hold")
                && stderr.contains("the cap is 268435456 bytes"),
            "{name}: {stderr}"
        );
        let peak = summary["peak_rss_kib"].as_u64().expect("peak");
        assert!(peak < 128 * 1024, "{name}: peak RSS {peak} KiB");
    }
    // 100,000 output rows that all point at one 1 MiB text (4 MiB of guest memory,
    // 100 GB if every row were copied): the default output cap ends the call after
    // 128 MiB, and the host never holds much more.
    let (code, _, summary, stderr) = plugin_test(&plugin("hostile-alias"), ONE_ROW, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr
            .contains("output cap exceeded: one call handed the engine more than 134217728 bytes"),
        "{stderr}"
    );
    let peak = summary["peak_rss_kib"].as_u64().expect("peak");
    assert!(
        peak < (128 + 96) * 1024,
        "peak RSS {peak} KiB: the 128 MiB output cap over a base of at most 96 MiB"
    );
    // 300 core instances: refused when the component is instantiated, so at load.
    let (code, _, _, stderr) = plugin_test(&plugin("hostile-instances"), ONE_ROW, &[]);
    assert_eq!(code, Some(2), "an unusable plugin: {stderr}");
    assert!(
        stderr.contains("`describe` failed")
            && stderr.contains("instance limit exceeded: instance count too high at 257"),
        "{stderr}"
    );

    // 1,000 hostile calls of each kind in one process: memory does not grow.
    for (name, args) in [
        ("hostile-alloc", vec!["--memory-mb", "16"]),
        ("hostile-loop", vec!["--fuel-per-call", "5000000"]),
        ("hostile-recursion", vec![]),
        ("hostile-snoop", vec![]),
        ("hostile-memories", vec![]),
        ("hostile-table", vec![]),
        ("hostile-alias", vec!["--output-mb", "1"]),
    ] {
        let mut all = args.clone();
        all.extend(["--repeat", "1000"]);
        let (_, _, summary, stderr) = plugin_test(&plugin(name), ONE_ROW, &all);
        let first = summary["rss_after_first_kib"]
            .as_u64()
            .unwrap_or_else(|| panic!("{stderr}"));
        let last = summary["rss_kib"].as_u64().expect("rss");
        assert_eq!(summary["runs"], 1000);
        assert!(
            last <= first + 16 * 1024,
            "{name}: RSS grew from {first} KiB after one call to {last} KiB after 1000 (bound: 16 MiB)"
        );
    }
}

/// `weir plugin test` reads rows as the feed writes them (Debezium envelopes, plain
/// JSON typed by `--column`, tagged values) and prints each input row's fate in input
/// order, the same in every language; a number that could be a decimal or a float is
/// refused untyped, and a rejection of an untyped column comes with a hint.
#[test]
fn plugin_test_previews_feed_rows_with_each_rows_fate() {
    let input = [
        json!({"op": "c", "before": null, "after": {"id": 1, "customer": "alice", "order_date": "2026-03-01", "amount": "7", "status": "new"}, "source": {"schema": "public", "table": "orders", "txId": 7}, "ts_ms": 1_772_323_200_000i64}),
        json!({"id": 2, "customer": "bob", "order_date": "2026-03-01", "amount": 19.9, "status": "shipped"}),
        json!({"id": 3, "customer": "carol", "order_date": {"date": 20513}, "amount": {"decimal": "-1"}, "status": "new"}),
        json!({"op": "d", "before": {"id": 4, "order_date": "2026-03-01", "amount": "1"}, "after": null, "source": {"schema": "public", "table": "orders"}}),
        json!({"op": "u", "before": null, "after": {"id": 2, "customer": "bob", "order_date": 20513, "amount": "20", "status": "shipped"}, "source": {"schema": "public", "table": "orders", "txId": 8}}),
    ]
    .iter()
    .map(|j| format!("{j}\n"))
    .collect::<String>();
    let typed = [
        "-C",
        "rate=1.0825",
        "--column",
        "order_date=date:days,amount=numeric",
    ];
    let mut outputs = Vec::new();
    for lang in ORDERS_PLUGINS {
        let (code, out, _, stderr) = plugin_test_cached(
            &plugin(lang),
            &input,
            "2026-03-01",
            &typed,
            PluginHost::default_cache_dir(),
        );
        assert_eq!(code, Some(0), "{lang}: {stderr}");
        let lines: Vec<J> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), 5, "{lang}: one fate per input row: {out}");
        assert_eq!(lines[0]["line"], 1);
        assert_eq!(
            lines[0]["row"]["amount"],
            json!({"decimal": "7.00"}),
            "{lang}"
        );
        assert_eq!(lines[0]["row"]["amount_eur"], json!({"decimal": "7.58"}));
        // As the stage holds them: a key's last version only, and no deleted key.
        assert_eq!(
            lines[1],
            json!({"line": 2, "superseded": {"by": 5}}),
            "{lang}"
        );
        assert_eq!(
            lines[2],
            json!({"line": 3, "rejection": {"key": [{"integer": 3}], "reason": "amount is negative"}})
        );
        assert_eq!(
            lines[3],
            json!({"line": 4, "deleted": {"key": [{"integer": 4}]}})
        );
        assert_eq!(lines[4]["line"], 5);
        assert_eq!(
            lines[4]["row"]["amount"],
            json!({"decimal": "20.00"}),
            "{lang}"
        );
        assert!(
            stderr.contains("plugin test: 3 input rows: 2 output rows, 1 rejected, 0 dropped; 1 superseded by a later line of their key and 1 deleted, not pushed"),
            "{lang}: {stderr}"
        );
        outputs.push(out);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{outputs:?}");

    // Untyped: `19.9` is refused with what to do; the rest is read by its shape, and a
    // date given as a string is text, which the plugin rejects: the hint says why.
    let (code, _, _, stderr) = plugin_test(&plugin("orders-rust"), &input, &["-C", "rate=1"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rows.jsonl:2: column `amount`: 19.9 is a number with a fraction")
            && stderr.contains("--column amount=numeric(12,2)"),
        "{stderr}"
    );
    let without_line_2: String = input
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let (code, out, _, stderr) =
        plugin_test(&plugin("orders-rust"), &without_line_2, &["-C", "rate=1"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        out.starts_with(r#"{"line":1,"rejection":{"key":[{"integer":1}],"reason":"column `order_date` is not a date"}}"#),
        "{out}"
    );
    assert!(
        stderr.contains("hint: column `order_date` was given without a type")
            && stderr.contains("--column order_date=date"),
        "{stderr}"
    );
    // A bad type name is refused naming the flag.
    let (code, _, _, stderr) = plugin_test(
        &plugin("orders-rust"),
        &input,
        &["--column", "amount=money"],
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("--column `amount=money`"), "{stderr}");
    // A key given twice, a column no row has, a number without its unit: refused,
    // naming what to write.
    for (args, want, exit) in [
        (
            &["-C", "rate=1", "-C", "rate=2"][..],
            "`rate` is given twice",
            2,
        ),
        (
            &["-C", "rate=1", "--column", "order_dat=date,amount=numeric"][..],
            "--column order_dat: no input row has a column `order_dat`",
            2,
        ),
        (
            &["-C", "rate=1", "--column", "order_date=date,amount=numeric"][..],
            "--column order_date=date:UNIT",
            1,
        ),
    ] {
        let (code, _, _, stderr) = plugin_test(&plugin("orders-rust"), &input, args);
        assert_eq!(code, Some(exit), "{stderr}");
        assert!(stderr.contains(want), "want `{want}` in {stderr}");
    }
}

/// `n` orders rows in `plugin test`'s input format.
fn orders_rows(n: i64) -> String {
    (1..=n)
        .map(|i| {
            let row = json!({
                "key": [{"integer": i}],
                "commit_time": 1_772_323_200_000_000i64,
                "columns": {
                    "id": {"integer": i},
                    "customer": {"text": "c"},
                    "order_date": {"date": 20513},
                    "amount": {"decimal": "1.00"},
                    "status": {"text": "new"},
                },
            });
            format!("{row}\n")
        })
        .collect()
}

/// The fuel budget grows with the rows a call handles: a plugin within its per-row
/// budget passes at 10 rows and at 5,000 (a chunk of 4,096 and one of 904) alike,
/// while the same call budget without the per-row part fails the full chunk.
#[test]
fn the_fuel_budget_is_per_row_so_chunk_size_does_not_decide() {
    let orders = plugin("orders-rust");
    for n in [10, 5000] {
        let (code, out, _, stderr) = plugin_test(
            &orders,
            &orders_rows(n),
            &[
                "-C",
                "rate=1",
                "--fuel-per-call",
                "1000000",
                "--fuel-per-row",
                "200000",
            ],
        );
        assert_eq!(code, Some(0), "{n} rows: {stderr}");
        assert_eq!(out.lines().count(), n as usize, "{n} rows out");
    }
    let (code, _, _, stderr) = plugin_test(
        &orders,
        &orders_rows(5000),
        &[
            "-C",
            "rate=1",
            "--fuel-per-call",
            "1000000",
            "--fuel-per-row",
            "0",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("CPU budget exceeded: the call used its 1000000 units of fuel (1000000 for the call and 0 for each of its 4096 rows")
            && stderr.contains("raise `plugin_fuel_per_row`"),
        "{stderr}"
    );
}

#[test]
fn a_snooping_plugin_sees_nothing_and_the_same_values_at_any_time() {
    let wasm = plugin("hostile-snoop");
    let (code, first, summary, stderr) = plugin_test(&wasm, ONE_ROW, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    // Its 30 s sleep between the clock readings returns at once: time does not pass in
    // the sandbox, and a sleep never holds the host's thread.
    let ms = summary["slowest_ms"].as_u64().expect("slowest_ms");
    assert!(ms < 10_000, "the job took {ms} ms");
    std::thread::sleep(Duration::from_millis(1100));
    let (_, second, _, _) = plugin_test(&wasm, ONE_ROW, &[]);
    assert_eq!(
        first, second,
        "two runs a second apart give identical output"
    );
    let row: J = serde_json::from_str(first.lines().next().expect("a row")).expect("json");
    let row = &row["row"];
    assert!(
        row["file"]["text"]
            .as_str()
            .expect("file")
            .starts_with("error:"),
        "{row}"
    );
    assert!(
        row["directory"]["text"]
            .as_str()
            .expect("dir")
            .starts_with("error:"),
        "{row}"
    );
    assert_eq!(row["environment"]["text"], "");
    assert_eq!(row["arguments"]["text"], "");
    // Both clocks read the job's instant: the newest commit time of its rows.
    assert_eq!(row["wall_clock_1"]["timestamp"], 1_772_323_200_000_000i64);
    assert_eq!(row["wall_clock_2"], row["wall_clock_1"]);
    assert_eq!(row["monotonic_1"]["integer"], 1_772_323_200_000_000_000i64);
    assert_eq!(row["monotonic_2"], row["monotonic_1"]);
    assert_ne!(row["random"], row["insecure_random"]);
    // Another partition draws other random bytes.
    let other_partition = ONE_ROW.replace("20513", "20514");
    let (_, other, _, _) = plugin_test_in(&wasm, &other_partition, "2026-03-02", &[]);
    let other: J = serde_json::from_str(other.lines().next().expect("row")).expect("json");
    assert_ne!(other["row"]["random"], row["random"]);
}

#[test]
fn plugin_inspect_shows_the_contract_and_the_imports() {
    let wasm = plugin("orders-rust");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "inspect", "--json"])
        .arg(&wasm)
        .env(
            "WEIR_PLUGIN_CACHE",
            tempfile::tempdir().expect("dir").path(),
        )
        .output()
        .expect("inspect");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: J = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(j["name"], "orders");
    assert_eq!(j["kind"], "row");
    assert_eq!(j["grain_key"], json!(["id"]));
    assert_eq!(j["partition_column"], "order_date");
    assert_eq!(j["sha256"], sha256_file(&wasm));
    assert_eq!(
        j["columns"][4],
        json!({"name": "amount_eur", "type": "numeric", "precision": 14, "scale": 2, "nullable": true})
    );
    let imports: Vec<&str> = j["imports"]
        .as_array()
        .expect("imports")
        .iter()
        .filter_map(J::as_str)
        .collect();
    assert!(
        imports
            .iter()
            .all(|i| i.starts_with("wasi:") || i.starts_with("weir:transform/")),
        "{imports:?}"
    );
    assert!(!imports.iter().any(|i| i.starts_with("wasi:http")));
    // The Rust SDK's plugin reads no clock, so its merges read only what changed; a
    // snooping one does.
    assert_eq!(j["reads_clock"], false);
    assert!(!imports.iter().any(|i| i.starts_with("wasi:clocks/")));
    let snoop = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "inspect"])
        .arg(plugin("hostile-snoop"))
        .env(
            "WEIR_PLUGIN_CACHE",
            tempfile::tempdir().expect("dir").path(),
        )
        .output()
        .expect("inspect");
    assert!(
        text(&snoop.stdout).contains("clock:            imports one"),
        "{}",
        text(&snoop.stdout)
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "inspect", "/nonexistent/plugin.wasm"])
        .output()
        .expect("inspect");
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("cannot read plugin /nonexistent/plugin.wasm"));
    let not_wasm = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(not_wasm.path(), b"not a component").expect("write");
    let bad = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "inspect"])
        .arg(not_wasm.path())
        .output()
        .expect("inspect");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr)
            .contains("is not a usable weir:transform component: it is not a WebAssembly file"),
        "{}",
        text(&bad.stderr)
    );
    std::fs::write(not_wasm.path(), b"\0asm\x01\0\0\0").expect("write");
    let core = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "inspect"])
        .arg(not_wasm.path())
        .output()
        .expect("inspect");
    assert!(
        text(&core.stderr).contains("it is a core WebAssembly module, not a component"),
        "{}",
        text(&core.stderr)
    );
}

#[test]
fn each_contract_is_recognised_by_what_the_component_exports() {
    let cache = tempfile::tempdir().expect("dir");
    for (name, contract) in [
        ("orders-rust", "weir:transform@0.2.0"),
        ("orders-rust-0-1", "weir:transform@0.1.0"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["plugin", "inspect", "--json"])
            .arg(plugin(name))
            .env("WEIR_PLUGIN_CACHE", cache.path())
            .output()
            .expect("inspect");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let j: J = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(j["contract"], contract, "{name}");
        assert_eq!(
            j["name"], "orders",
            "{name}: the same plugin on either contract"
        );
    }
}

/// A live `weir run` whose stderr is collected line by line.
struct Live {
    child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Live {
    fn start(db: &TestDb) -> Live {
        let mut child = db
            .weir_command(&["run"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir run");
        let stderr = child.stderr.take().expect("stderr");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("lines").push(l);
            }
        });
        Live { child, lines }
    }

    fn wait_for_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self
                .lines
                .lock()
                .expect("lines")
                .iter()
                .any(|l| l.contains(needle))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "no log line with `{needle}` within 60 s:\n{}",
            self.lines.lock().expect("lines").join("\n")
        );
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_for_rows(db: &TestDb, table: &str, count: i64) {
    let client = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or(0);
        if n >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{table} has {n} rows, want {count}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_plugins_fail_their_partitions_while_the_live_engine_serves_the_others() {
    let db = TestDb::new("plugin_hostile_live").await;
    let hostile = |name: &str, extra: &str| {
        orders_table(
            &format!("public.{}", name.replace('-', "_")),
            &format!("analytics.{}", name.replace('-', "_")),
            &plugin(name),
            extra,
        )
    };
    let tables = [
        orders_table(
            "public.orders",
            "analytics.orders_eur",
            &plugin("orders-rust"),
            "[table.plugin_config]\nrate = \"1\"\n",
        ),
        hostile("hostile-loop", "plugin_timeout_ms = 500\n"),
        hostile("hostile-alloc", ""),
        hostile("hostile-recursion", ""),
        hostile("hostile-snoop", ""),
        hostile("hostile-output", "plugin_output_mb = 16\n"),
        // Caps of their own, so that each one's error is known apart in the log.
        hostile("hostile-memories", "plugin_memory_mb = 128\n"),
        hostile("hostile-table", "plugin_memory_mb = 96\n"),
        hostile("hostile-alias", "plugin_output_mb = 8\n"),
    ]
    .concat();
    write_config(&db, &tables);
    db.write_feed(&[line("orders", "c", 1, "2026-03-01", "1.00", "new")]);
    db.weir_ok(&["init"]);
    let live = Live::start(&db);
    wait_for_rows(&db, "analytics.orders_eur", 1).await;
    let pid = live.child.id();
    let base_peak = procmem::peak_rss_kib(Process::Pid(pid));

    db.append_feed(&[
        line("hostile_loop", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_alloc", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_recursion", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_snoop", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_output", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_memories", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_table", "c", 1, "2026-03-01", "1.00", "new"),
        line("hostile_alias", "c", 1, "2026-03-01", "1.00", "new"),
    ]);
    live.wait_for_log("CPU budget exceeded");
    live.wait_for_log("output cap exceeded");
    live.wait_for_log("the cap is 134217728 bytes (`plugin_memory_mb`)");
    live.wait_for_log("the cap is 100663296 bytes (`plugin_memory_mb`)");
    live.wait_for_log("more than 8388608 bytes (`plugin_output_mb`)");
    live.wait_for_log("memory cap exceeded");
    live.wait_for_log("wasm stack overflow");
    let peak = procmem::peak_rss_kib(Process::Pid(pid));
    assert!(
        peak <= base_peak + 256 * 1024 * 11 / 10,
        "peak RSS grew from {base_peak} KiB to {peak} KiB: more than the 256 MiB cap plus 10%"
    );

    // The engine is alive and keeps writing the other partitions and tables.
    db.append_feed(&[
        line("orders", "c", 2, "2026-03-02", "2.00", "new"),
        line("orders", "c", 3, "2026-03-01", "3.00", "new"),
    ]);
    wait_for_rows(&db, "analytics.orders_eur", 3).await;
    let mut live = live;
    assert!(
        live.child.try_wait().expect("child").is_none(),
        "the engine is still running"
    );
    let client = db.client().await;
    // The snooping plugin's partition is written, with what the sandbox let it see.
    let snooped = client
        .query_one(
            "SELECT file, environment, wall_clock_1 = wall_clock_2 FROM analytics.hostile_snoop",
            &[],
        )
        .await
        .expect("snoop row");
    assert!(snooped.get::<_, String>(0).starts_with("error:"));
    assert_eq!(snooped.get::<_, String>(1), "");
    assert!(snooped.get::<_, bool>(2));
    for t in [
        "hostile_loop",
        "hostile_alloc",
        "hostile_recursion",
        "hostile_output",
        "hostile_memories",
        "hostile_table",
        "hostile_alias",
    ] {
        let n: i64 = db
            .count(&format!("SELECT count(*) FROM analytics.{t}"))
            .await;
        assert_eq!(n, 0, "{t} wrote nothing");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_plugin_writes_one_aggregate_row_per_group() {
    let db = TestDb::new("plugin_daily_totals").await;
    write_config(
        &db,
        &orders_table(
            "public.orders",
            "analytics.daily_totals",
            &plugin("daily-totals-rust"),
            "",
        ),
    );
    db.write_feed(&orders_feed());
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    // The same totals, computed from the feed's orders.
    let mut want: std::collections::BTreeMap<(String, String), (i64, i64)> = Default::default();
    for id in 1..=60i64 {
        let day = format!("2026-03-0{}", 1 + id % 3);
        let status = if id % 2 == 0 { "new" } else { "Shipped" };
        let cents = if id % 20 == 0 {
            -(id * 100 + 50)
        } else {
            id * 300 + id % 100
        };
        let e = want.entry((day, status.to_owned())).or_default();
        e.0 += 1;
        e.1 += cents;
    }
    let got: std::collections::BTreeMap<(String, String), (i64, i64)> = db
        .client()
        .await
        .query(
            "SELECT order_date::text, status, orders, (amount * 100)::bigint FROM analytics.daily_totals",
            &[],
        )
        .await
        .expect("totals")
        .iter()
        .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3))))
        .collect();
    assert_eq!(got, want);
    let again = db.weir_ok(&["run", "--once"]);
    assert!(again.contains("wrote 0 partitions"), "{again}");
}

/// Contract 0.2's output in parts: `fan-out` holds a partition's rows and emits 1000
/// rows for each from `finish`, so a day of 20 rows comes out in parts of at most 4096
/// rows (`more`, then `next`); every part is written, once, in the one replace.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_plugin_s_output_in_parts_is_written_whole() {
    let db = TestDb::new("plugin_output_parts").await;
    write_config(
        &db,
        &orders_table(
            "public.orders",
            "analytics.fanned",
            &plugin("fan-out"),
            "[table.plugin_config]\ncopies = \"1000\"\n",
        ),
    );
    db.write_feed(&orders_feed());
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT order_date::text, count(*), count(DISTINCT id), min(id), max(id)
             FROM analytics.fanned GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await
        .expect("fanned");
    let got: Vec<(String, i64, i64, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    // 60 orders over three days, 20 a day: ids 1..=60 with id % 3 giving the day.
    let want: Vec<(String, i64, i64, i64, i64)> = (0..3)
        .map(|d| {
            let ids: Vec<i64> = (1..=60).filter(|id| (id % 3) as usize == d).collect();
            (
                format!("2026-03-0{}", 1 + d),
                20_000,
                20_000,
                ids[0] * 1000,
                ids[19] * 1000 + 999,
            )
        })
        .collect();
    assert_eq!(got, want);
    let again = db.weir_ok(&["run", "--once"]);
    assert!(again.contains("wrote 0 partitions"), "{again}");
}

#[tokio::test(flavor = "multi_thread")]
async fn init_adds_a_plugin_s_new_nullable_columns_only_when_asked() {
    let db = TestDb::new("plugin_add_columns").await;
    let table = |name: &str| orders_table("public.orders", "analytics.probe", &plugin(name), "");
    // hostile-loop declares (id, order_date); init only calls `describe`.
    write_config(&db, &table("hostile-loop"));
    db.write_feed(&[line("orders", "c", 1, "2026-03-01", "1.00", "new")]);
    db.weir_ok(&["init"]);

    // hostile-snoop declares the same and nine nullable columns more.
    write_config(&db, &table("hostile-snoop"));
    let refused = db.weir(&["init"]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(
            "column `file` (text, nullable) is missing: `weir init --allow-add-columns` adds it"
        ),
        "{stderr}"
    );
    db.weir_ok(&["init", "--allow-add-columns"]);
    db.weir_ok(&["run", "--once"]);
    let file: String = db
        .client()
        .await
        .query_one("SELECT file FROM analytics.probe WHERE id = 1", &[])
        .await
        .expect("row")
        .get(0);
    assert!(file.starts_with("error:"), "{file}");

    // A missing NOT NULL column is never added: hostile-alloc's `allocated`.
    write_config(&db, &table("hostile-alloc"));
    let refused = db.weir(&["init", "--allow-add-columns"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("column `allocated` (bigint) is missing"),
        "{}",
        text(&refused.stderr)
    );
}

/// The languages `weir plugin new` writes projects in.
const GENERATED_LANGS: &[&str] = &["rust", "python", "js", "c", "cpp"];

/// `weir plugin new NAME --lang L` writes a project that `weir plugin build` builds
/// with its pinned toolchain and that passes its own cases in Weir's host, as written,
/// in every language; each language's plugin (a pii mask: a salted SHA-256, an
/// upper-case, a rejection, a filter, exact decimals) gives the same bytes for the same
/// rows (byte order marks, a no-break space, non-ASCII letters, 2^53 + 1, a decimal of
/// nine places), and each passes `weir verify` in a pipeline. Names and folders are
/// checked.
#[tokio::test(flavor = "multi_thread")]
async fn a_generated_project_builds_and_passes_its_cases_in_every_language() {
    let weir = |args: &[&str], dir: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .current_dir(dir)
            // Share the plugins' build cache, so a project's dependencies build once.
            .env(
                "CARGO_TARGET_DIR",
                std::env::var_os("WEIR_PLUGINS_TARGET_DIR").unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                        .join(".cache/weir-plugins-target")
                        .into()
                }),
            )
            .output()
            .expect("run weir");
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut previews = Vec::new();
    let mut targets = Vec::new();
    for lang in GENERATED_LANGS {
        let name = format!("mask-{lang}");
        let (code, out, err) = weir(&["plugin", "new", &name, "--lang", lang], dir.path());
        assert_eq!(code, Some(0), "{lang}: {out}{err}");
        let project = dir.path().join(&name);
        let (code, out, err) = weir(&["plugin", "build"], &project);
        assert_eq!(code, Some(0), "{lang}: {out}{err}");
        assert!(
            out.contains(&format!("plugin `{name}` 0.1.0, 5 columns")),
            "{lang}: {out}"
        );
        let wasm = format!("{name}.wasm");
        let (code, out, err) = weir(
            &["plugin", "test", &wasm, "--cases", "cases.jsonl"],
            &project,
        );
        assert_eq!(code, Some(0), "{lang}: {out}{err}");
        assert!(
            out.contains("10 cases: 10 passed, 0 failed"),
            "{lang}: {out}"
        );
        let (code, out, err) = weir(
            &[
                "plugin",
                "test",
                &wasm,
                "--input",
                "rows.jsonl",
                "--partition",
                "2026-03-01",
                "--column",
                "day=date,amount=numeric",
                "-C",
                "salt=s1",
                "-C",
                "drop_country=XX",
            ],
            &project,
        );
        assert_eq!(code, Some(0), "{lang}: {err}");
        assert_eq!(
            out.lines()
                .map(|l| &l[..l.find(',').unwrap_or(l.len())])
                .collect::<Vec<_>>(),
            [
                r#"{"line":1"#,
                r#"{"line":2"#,
                r#"{"line":3"#,
                r#"{"line":4"#
            ],
            "{lang}: {out}"
        );
        assert!(
            out.contains(r#""dropped""#)
                && out.contains("email has no @")
                && out.contains(r#"{"integer":9007199254740993}"#),
            "{lang}: {out}"
        );
        previews.push((lang, out));

        // In a pipeline: the sample rows through `run --once`, then `weir verify`.
        let db = TestDb::new(&format!("generated_{lang}")).await;
        write_config(
            &db,
            &format!(
                "\n[[table]]\nsource = \"public.events\"\ntarget = \"analytics.masked\"\nkey = [\"id\"]\n\
                 partition_by = \"day\"\ngrain = \"day\"\n\
                 columns = {{ id = \"bigint\", day = \"date\", email = \"text\", country = \"text\", amount = \"numeric\" }}\n\
                 plugin = \"{}\"\n[table.plugin_config]\nsalt = \"s1\"\ndrop_country = \"XX\"\n",
                project.join(&wasm).display()
            ),
        );
        let rows = std::fs::read_to_string(project.join("rows.jsonl")).expect("rows");
        db.write_feed(&rows.lines().map(|l| format!("{l}\n")).collect::<Vec<_>>());
        db.weir_ok(&["init"]);
        let run = db.weir_ok(&["run", "--once"]);
        assert!(run.contains("1 rows rejected by plugins"), "{lang}: {run}");
        let verify: J = serde_json::from_str(&db.weir_ok(&[
            "verify",
            "--table",
            "public.events",
            "--from",
            "2026-03-01",
            "--to",
            "2026-03-02",
            "--json",
        ]))
        .expect("verify json");
        assert!(
            verify
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0]["ok"] == true),
            "{lang}: {verify}"
        );
        targets.push((
            lang,
            target_text(&db, "analytics.masked").await,
            db.count("SELECT count(*) FROM weir.dead_letter").await,
        ));
    }
    // The same bytes in every language, in the preview and in the target.
    for (lang, out) in &previews[1..] {
        assert_eq!(out, &previews[0].1, "{lang} against {}", previews[0].0);
    }
    for (lang, rows, dead) in &targets {
        assert_eq!(rows.len(), 2, "{lang}: {rows:?}");
        assert_eq!(*dead, 1, "{lang}");
        assert_eq!(rows, &targets[0].1, "{lang} against {}", targets[0].0);
    }
    // A name no language can use, and a folder that is taken, are refused.
    let (code, _, err) = weir(&["plugin", "new", "Bad_Name", "--lang", "rust"], dir.path());
    assert_ne!(code, Some(0));
    assert!(err.contains("plugin name `Bad_Name`"), "{err}");
    let (code, _, err) = weir(
        &["plugin", "new", "mask-rust", "--lang", "rust"],
        dir.path(),
    );
    assert_ne!(code, Some(0));
    assert!(err.contains("exists and is not empty"), "{err}");
    let (code, _, err) = weir(&["plugin", "build"], dir.path());
    assert_ne!(code, Some(0));
    assert!(err.contains("has no build.sh"), "{err}");
    // A build that fails shows what its tools said.
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).expect("dir");
    std::fs::write(
        broken.join("build.sh"),
        "echo 'app.py line 81: SyntaxError' >&2\nexit 1\n",
    )
    .expect("build.sh");
    let (code, _, err) = weir(&["plugin", "build"], &broken);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("app.py line 81: SyntaxError") && err.contains("its output is above"),
        "{err}"
    );
}
