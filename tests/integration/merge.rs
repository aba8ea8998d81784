//! `write = "merge"`: only the keys changed since a partition's last write are deleted
//! and rewritten. A property test runs random workloads (inserts, updates, deletes,
//! partition moves, in several steps so that merges build on earlier writes) through
//! five pipelines fed by the same feed: identity replace (plain table), identity merge
//! (native partitions), and the Rust orders plugin in replace, in merge and in auto
//! (the default). Each must give the same target as its replace after every step, the
//! identity ones the oracle's state, and a merged partition's lineage row count must
//! be its true row count.

use std::path::Path;
use std::process::Output;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use tokio_postgres::Client;

use crate::harness::{
    Order, TestDb, Workload, assert_target_matches, envelope, orders_table, text,
};
use crate::plugins::plugin;

/// The five pipelines: (config file, target table, `[[table]]` extra lines).
fn pipelines() -> [(&'static str, &'static str, String); 5] {
    let wasm = plugin("orders-rust");
    let orders = format!(
        "plugin = {:?}\nwrite = \"{{mode}}\"\n[table.plugin_config]\nrate = \"1\"",
        wasm.display().to_string()
    );
    [
        (
            "replace.toml",
            "analytics.identity_replace",
            "write = \"replace\"".into(),
        ),
        (
            "merge.toml",
            "analytics.identity_merge",
            "write = \"merge\"\ntarget_partitioning = \"native\"".into(),
        ),
        (
            "plugin-replace.toml",
            "analytics.plugin_replace",
            orders.replace("{mode}", "replace"),
        ),
        (
            "plugin-merge.toml",
            "analytics.plugin_merge",
            orders.replace("{mode}", "merge"),
        ),
        (
            "plugin-auto.toml",
            "analytics.plugin_auto",
            orders.replace("write = \"{mode}\"\n", ""),
        ),
    ]
}

fn write_config(db: &TestDb, file: &str, target: &str, extra: &str) {
    let stage = file.trim_end_matches(".toml");
    let text = format!(
        "[source]\nkind = \"jsonl\"\npath = \"feed.jsonl\"\n\n[stage]\npath = \"stage-{stage}\"\n\n\
         [target]\nkind = \"postgres\"\ndsn_env = \"WEIR_TARGET_DSN\"\n\n[engine]\nparallelism = 2\n{}",
        orders_table("public.orders", target, extra)
    );
    std::fs::write(db.path(file), text).expect("write config");
}

fn weir(db: &TestDb, config: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env("WEIR_TARGET_DSN", &db.dsn)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run weir")
}

fn weir_ok(db: &TestDb, config: &str, args: &[&str]) {
    let out = weir(db, &db.path(config), args);
    assert!(
        out.status.success(),
        "weir --config {config} {args:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Every row of a table as text, in a fixed order.
async fn contents(client: &Client, table: &str) -> Vec<String> {
    client
        .query(
            &format!("SELECT t::text FROM {table} t ORDER BY id, t::text"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("read {table}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Partitions whose lineage row count is not the number of rows the table holds.
async fn wrong_counts(client: &Client, table: &str) -> Vec<String> {
    client
        .query(
            &format!(
                "SELECT p.partition || ': lineage ' || p.row_count || ', table ' || count(t.id) \
                 FROM weir.partitions p LEFT JOIN {table} t ON t.order_date::text = p.partition \
                 WHERE p.target_table = $1 GROUP BY p.partition, p.row_count \
                 HAVING p.row_count <> count(t.id)"
            ),
            &[&table],
        )
        .await
        .expect("compare lineage counts")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn merge_case(seed: u64, steps: usize, changes: usize, days: u32) -> usize {
    static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let db = TestDb::new(&format!("merge_prop_{case}")).await;
    let pipelines = pipelines();
    for (file, target, extra) in &pipelines {
        write_config(&db, file, target, extra);
    }
    db.write_feed(&[]);
    for (file, _, _) in &pipelines {
        weir_ok(&db, file, &["init"]);
    }
    let client = db.client().await;
    let mut workload = Workload::new(seed, days);
    for step in 0..steps {
        db.append_feed(&workload.lines(changes, 4));
        for (file, _, _) in &pipelines {
            weir_ok(&db, file, &["run", "--once"]);
        }
        let context =
            format!("seed {seed}, step {step} of {steps}, {changes} changes over {days} days");
        assert_target_matches(&client, "analytics.identity_replace", &workload.model).await;
        assert_eq!(
            contents(&client, "analytics.identity_replace").await,
            contents(&client, "analytics.identity_merge").await,
            "identity: merge differs from replace ({context})"
        );
        assert_eq!(
            contents(&client, "analytics.plugin_replace").await,
            contents(&client, "analytics.plugin_merge").await,
            "orders plugin: merge differs from replace ({context})"
        );
        assert_eq!(
            contents(&client, "analytics.plugin_replace").await,
            contents(&client, "analytics.plugin_auto").await,
            "orders plugin: auto differs from replace ({context})"
        );
        for table in [
            "analytics.identity_merge",
            "analytics.plugin_merge",
            "analytics.plugin_auto",
        ] {
            let wrong = wrong_counts(&client, table).await;
            assert!(
                wrong.is_empty(),
                "{table}: lineage row counts are wrong ({context}): {wrong:?}"
            );
        }
    }
    let merged: i64 = client
        .query_one(
            "SELECT count(*) FROM weir.partitions WHERE write_mode = 'merge'",
            &[],
        )
        .await
        .expect("count merged partitions")
        .get(0);
    usize::try_from(merged).unwrap_or(0)
}

#[test]
fn merge_and_replace_give_identical_targets_on_random_workloads() {
    let cases = std::env::var("WEIR_MERGE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 16,
        ..ProptestConfig::default()
    });
    let merged_total = std::cell::Cell::new(0);
    runner
        .run(
            &(any::<u64>(), 2usize..5, 1usize..40, 1u32..5),
            |(seed, steps, changes, days)| {
                merged_total.set(
                    merged_total.get() + runtime.block_on(merge_case(seed, steps, changes, days)),
                );
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    // The cases must have merged, not only fallen back to replacing.
    assert!(merged_total.get() > 0, "no partition was ever merged");
}

#[tokio::test(flavor = "multi_thread")]
async fn merge_is_refused_for_a_partition_plugin_and_a_foreign_grain_key() {
    let db = TestDb::new("merge_refused").await;
    let totals = plugin("daily-totals-rust");
    db.write_feed(&[]);
    write_config(
        &db,
        "weir.toml",
        "analytics.totals",
        &format!(
            "plugin = {:?}\nwrite = \"merge\"",
            totals.display().to_string()
        ),
    );
    let out = weir(&db, &db.config_path(), &["init"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "init must refuse: {stderr}");
    assert!(
        stderr.contains("table public.orders: write:") && stderr.contains("`partition`-kind"),
        "{stderr}"
    );
    // The identity with a key the target lacks cannot happen; a plugin whose grain key
    // is not the table's key is refused naming both.
    let orders = plugin("orders-rust");
    write_config(
        &db,
        "weir.toml",
        "analytics.orders",
        &format!(
            "plugin = {:?}\nwrite = \"merge\"",
            orders.display().to_string()
        ),
    );
    let config = std::fs::read_to_string(db.config_path()).expect("read config");
    std::fs::write(
        db.config_path(),
        config.replace("key = [\"id\"]", "key = [\"id\", \"customer\"]"),
    )
    .expect("write config");
    let out = weir(&db, &db.config_path(), &["init"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "init must refuse: {stderr}");
    assert!(
        stderr.contains("grain key (id) to be the table's key (id, customer)"),
        "{stderr}"
    );
}

/// A merge of more than 4096 keys copies them into a temporary table: with a target
/// `search_path` that puts a schema holding a table of its name before `pg_temp` (the
/// usual hardening, `search_path = public, pg_temp`), the keys still go to the
/// temporary table, and the other table's keys are not deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_merge_uses_its_own_temporary_table_whatever_the_search_path() {
    let db = TestDb::new("merge_search_path").await;
    let lines: Vec<String> = (1..=10_000)
        .map(|id| envelope("c", None, None, Some(&march_first(id, "new"))))
        .collect();
    db.write_feed(&lines);
    db.write_config("", "write = \"merge\"", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE TABLE public.weir_merge_keys (k0 bigint); INSERT INTO public.weir_merge_keys VALUES (1), (3), (5);",
        )
        .await
        .expect("a table of the temporary table's name");
    let lines: Vec<String> = (1..=10_000)
        .filter(|id| id % 2 == 0)
        .take(4_500)
        .map(|id| {
            envelope(
                "u",
                None,
                Some(&march_first(id, "new")),
                Some(&march_first(id, "paid")),
            )
        })
        .collect();
    db.append_feed(&lines);
    let out = db
        .weir_command(&["run", "--once"])
        .env(
            "WEIR_TARGET_DSN",
            format!("{}?options=-csearch_path%3Dpublic%2Cpg_temp", db.dsn),
        )
        .output()
        .expect("run weir");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(write_mode(&client, "2026-03-01").await, "merge");
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        10_000
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders WHERE status = 'paid'")
            .await,
        4_500
    );
    assert_eq!(
        db.count("SELECT count(*) FROM public.weir_merge_keys")
            .await,
        3
    );
}

/// Order `id` of 2026-03-01 with `status`.
fn march_first(id: i64, status: &str) -> Order {
    Order {
        id,
        customer: format!("c{id}"),
        order_date: Some("2026-03-01".into()),
        amount: format!("{id}.50"),
        status: status.into(),
    }
}

/// What lineage says the last write of a partition was.
async fn write_mode(client: &Client, partition: &str) -> String {
    client
        .query_one(
            "SELECT write_mode FROM weir.partitions WHERE partition = $1",
            &[&partition],
        )
        .await
        .expect("read lineage")
        .get(0)
}

/// `write = "auto"`, the default: a partition with a few changed keys is merged, one
/// where most rows changed is replaced, a first write is a replace; lineage says
/// which; a `partition`-kind plugin, which cannot merge, is accepted and replaces.
#[tokio::test(flavor = "multi_thread")]
async fn auto_merges_a_few_changed_keys_and_replaces_a_mostly_changed_partition() {
    let db = TestDb::new("write_auto").await;
    let order = march_first;
    let mut model = crate::harness::Model::default();
    let mut lines = Vec::new();
    for id in 1..=10 {
        lines.push(envelope("c", None, None, Some(&order(id, "new"))));
        model.rows.insert(id, order(id, "new"));
    }
    db.write_feed(&lines);
    db.write_config("", "", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    assert_eq!(
        write_mode(&client, "2026-03-01").await,
        "replace",
        "first write"
    );
    // One key of ten changed (and one deleted): merged.
    db.append_feed(&[
        envelope("u", None, Some(&order(3, "new")), Some(&order(3, "paid"))),
        envelope("d", None, Some(&order(4, "new")), None),
    ]);
    model.rows.insert(3, order(3, "paid"));
    model.rows.remove(&4);
    db.weir_ok(&["run", "--once"]);
    assert_eq!(write_mode(&client, "2026-03-01").await, "merge");
    assert_target_matches(&client, "analytics.fact_orders", &model).await;
    // Six of the nine rows changed: replaced.
    let mut lines = Vec::new();
    for id in [1, 2, 5, 6, 7, 8] {
        lines.push(envelope(
            "u",
            None,
            Some(&order(id, "new")),
            Some(&order(id, "shipped")),
        ));
        model.rows.insert(id, order(id, "shipped"));
    }
    db.append_feed(&lines);
    db.weir_ok(&["run", "--once"]);
    assert_eq!(write_mode(&client, "2026-03-01").await, "replace");
    assert_target_matches(&client, "analytics.fact_orders", &model).await;
    let rows = db
        .count("SELECT row_count FROM weir.partitions WHERE partition = '2026-03-01'")
        .await;
    assert_eq!(rows, 9, "lineage's row count");
    // A partition-kind plugin under the default mode: accepted, and replaced.
    let totals = plugin("daily-totals-rust");
    write_config(
        &db,
        "totals.toml",
        "analytics.totals",
        &format!("plugin = {:?}", totals.display().to_string()),
    );
    weir_ok(&db, "totals.toml", &["init"]);
    weir_ok(&db, "totals.toml", &["run", "--once"]);
    db.append_feed(&[envelope(
        "u",
        None,
        Some(&order(9, "new")),
        Some(&order(9, "paid")),
    )]);
    weir_ok(&db, "totals.toml", &["run", "--once"]);
    let modes: Vec<String> = client
        .query(
            "SELECT DISTINCT write_mode FROM weir.partitions WHERE target_table = 'analytics.totals'",
            &[],
        )
        .await
        .expect("read lineage")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(modes, ["replace"]);
}

/// A round of small changes over many partitions merges them in one group: one target
/// transaction (so one `written_at` in lineage), each partition with its own lineage
/// and rejections; a rejected row's dead letter names its partition and goes when the
/// row is fixed; the target stays what replacing every partition gives.
#[tokio::test(flavor = "multi_thread")]
async fn small_merges_of_many_partitions_go_in_one_transaction_with_their_rejections() {
    let db = TestDb::new("merge_group").await;
    let pipelines = pipelines();
    let picked = [&pipelines[2], &pipelines[4]]; // orders plugin: replace (oracle), auto
    for (file, target, extra) in picked {
        write_config(&db, file, target, extra);
    }
    let order = |id: i64, amount: &str, status: &str| Order {
        id,
        customer: format!("c{id}"),
        order_date: Some(format!("2026-03-{:02}", 1 + (id - 1) / 6)),
        amount: amount.into(),
        status: status.into(),
    };
    let days = 5;
    let lines: Vec<String> = (1..=6 * days)
        .map(|id| envelope("c", None, None, Some(&order(id, "10.00", "new"))))
        .collect();
    db.write_feed(&lines);
    let run_all = || {
        for (file, _, _) in picked {
            weir_ok(&db, file, &["run", "--once"]);
        }
    };
    for (file, _, _) in picked {
        weir_ok(&db, file, &["init"]);
    }
    run_all();
    let client = db.client().await;
    // One order of each day changes; the third day's gets a negative amount, which
    // the plugin rejects.
    let mut lines = Vec::new();
    for day in 0..days {
        let id = day * 6 + 2;
        let amount = if day == 2 { "-1.00" } else { "12.00" };
        lines.push(envelope(
            "u",
            None,
            Some(&order(id, "10.00", "new")),
            Some(&order(id, amount, "paid")),
        ));
    }
    db.append_feed(&lines);
    run_all();
    let group: (i64, i64) = {
        let row = client
            .query_one(
                "SELECT count(*), count(DISTINCT written_at) FROM weir.partitions \
                 WHERE target_table = 'analytics.plugin_auto' AND write_mode = 'merge'",
                &[],
            )
            .await
            .expect("read lineage");
        (row.get(0), row.get(1))
    };
    assert_eq!(
        group,
        (days, 1),
        "partitions merged, and their transactions"
    );
    let rejected: Vec<(String, String)> = client
        .query(
            "SELECT partition, row_key::text FROM weir.dead_letter \
             WHERE kind = 'rejected' AND target_table = 'analytics.plugin_auto'",
            &[],
        )
        .await
        .expect("read dead letters")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rejected, [("2026-03-03".to_owned(), "[14]".to_owned())]);
    assert_eq!(
        contents(&client, "analytics.plugin_replace").await,
        contents(&client, "analytics.plugin_auto").await,
        "a group's merges differ from replacing each partition"
    );
    // The rejected row fixed, beside a change in another day: its dead letter goes.
    db.append_feed(&[
        envelope(
            "u",
            None,
            Some(&order(14, "-1.00", "paid")),
            Some(&order(14, "14.00", "paid")),
        ),
        envelope("d", None, Some(&order(1, "10.00", "new")), None),
    ]);
    run_all();
    let left = db
        .count(
            "SELECT count(*) FROM weir.dead_letter WHERE kind = 'rejected' \
             AND target_table = 'analytics.plugin_auto'",
        )
        .await;
    assert_eq!(left, 0, "the fixed row's rejection is gone");
    assert_eq!(
        contents(&client, "analytics.plugin_replace").await,
        contents(&client, "analytics.plugin_auto").await,
        "after the fix"
    );
    let wrong = wrong_counts(&client, "analytics.plugin_auto").await;
    assert!(wrong.is_empty(), "lineage row counts: {wrong:?}");
}

/// A plugin that reads a clock sees its partition's newest commit time. A merge would
/// transform only the changed rows, at a time their change may have moved: the row's
/// output would depend on its job. So a merge in which the plugin read a clock is rolled
/// back and the partition replaced, and the table's partitions are replaced from then
/// on: the target is what a replace gives. (A plugin that imports no clock is given
/// none, and its merge reads only the changed rows.)
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_reads_a_clock_has_its_partitions_replaced_not_merged() {
    let db = TestDb::new("merge_clock").await;
    let order = march_first;
    // The harness's envelopes commit at 1772323200000 ms; these move it.
    let at = |line: String, ms: u64| line.replace("1772323200000", &ms.to_string());
    let mut lines: Vec<String> = (1..=9)
        .map(|id| envelope("c", None, None, Some(&order(id, "new"))))
        .collect();
    lines.push(at(
        envelope("c", None, None, Some(&order(10, "new"))),
        1_772_323_500_000,
    ));
    db.write_feed(&lines);
    let snoop = plugin("hostile-snoop");
    db.write_config(
        "",
        &format!(
            "plugin = {:?}\nwrite = \"merge\"",
            snoop.display().to_string()
        ),
        "",
    );
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let every_row_at = |t: i64| (1..=10).map(|id| (id, t)).collect::<Vec<_>>();
    assert_eq!(
        clocks(&client).await,
        every_row_at(1_772_323_500),
        "first write"
    );
    // An update committed after every other row: a merge would give only row 3 the new
    // time. The merge job reads the clock (a survey), is rolled back, and the replace
    // surveys again.
    db.append_feed(&[at(
        envelope("u", None, Some(&order(3, "new")), Some(&order(3, "paid"))),
        1_772_323_900_000,
    )]);
    assert_eq!(surveys(&db, &["run", "--once"]), [10, 10]);
    assert_eq!(write_mode(&client, "2026-03-01").await, "replace");
    assert_eq!(
        clocks(&client).await,
        every_row_at(1_772_323_900),
        "every row at the partition's newest commit time, as a replace gives"
    );
}

/// componentize-py's runtime imports `wasi:clocks` but the Python orders plugin never
/// reads a clock: it is never surveyed for one. Its runtime draws random bytes when it
/// starts (which seed what its `random` would give each row, in the job's order), so a
/// merge of it is rolled back and the partition replaced. Its output is the Rust
/// plugin's.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_imports_a_clock_it_never_reads_is_not_surveyed_and_is_replaced() {
    let db = TestDb::new("merge_unread_clock").await;
    let lines: Vec<String> = (1..=10)
        .map(|id| envelope("c", None, None, Some(&march_first(id, "new"))))
        .collect();
    db.write_feed(&lines);
    let python = plugin("orders-python");
    db.write_config(
        "",
        &format!(
            "plugin = {:?}\nwrite = \"merge\"\n[table.plugin_config]\nrate = \"2\"",
            python.display().to_string()
        ),
        "",
    );
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.append_feed(&[envelope(
        "u",
        None,
        Some(&march_first(3, "new")),
        Some(&march_first(3, "paid")),
    )]);
    assert_eq!(
        surveys(&db, &["run", "--once"]),
        Vec::<u64>::new(),
        "no survey"
    );
    let client = db.client().await;
    assert_eq!(write_mode(&client, "2026-03-01").await, "replace");
    let rows: Vec<(i64, String, String)> = client
        .query(
            "SELECT id, status, amount_eur::text FROM analytics.fact_orders ORDER BY id",
            &[],
        )
        .await
        .expect("read the target")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let want: Vec<(i64, String, String)> = (1..=10)
        .map(|id| {
            let status = if id == 3 { "PAID" } else { "NEW" };
            (id, status.to_owned(), format!("{}.00", 2 * id + 1))
        })
        .collect();
    assert_eq!(rows, want);
}

/// Runs `weir` and returns the row count of each partition survey it made for a
/// plugin's clock (from its debug log).
fn surveys(db: &TestDb, args: &[&str]) -> Vec<u64> {
    let out = db
        .weir_command(args)
        .env("RUST_LOG", "info,weir::pipeline::stream=debug")
        .output()
        .expect("run weir");
    let log = text(&out.stderr);
    assert!(out.status.success(), "weir {args:?} failed:\n{log}");
    log.lines()
        .filter(|l| l.contains("partition surveyed for the plugin's clock"))
        .map(|l| {
            let rows = l.split_once(" rows=").expect("rows field").1;
            rows.split(' ')
                .next()
                .unwrap_or_default()
                .parse()
                .expect("rows")
        })
        .collect()
}

/// Each row's id and the second its plugin read from the wall clock.
async fn clocks(client: &Client) -> Vec<(i64, i64)> {
    client
        .query(
            "SELECT id, extract(epoch FROM wall_clock_1)::bigint \
             FROM analytics.fact_orders ORDER BY id",
            &[],
        )
        .await
        .expect("read the clocks")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}
