//! The hostile plugin campaign: every hostile plugin that fails at run time (not at
//! load), each over many partitions, in one `weir run --once` process beside a
//! well-behaved table. Each hostile job fails alone with the error naming its limit,
//! the well-behaved table's target is exact, and the process's peak RSS stays under
//! the budget the config states: RocksDB's, plus `parallelism` times the largest
//! plugin memory cap and output cap, plus a base for the engine itself.
//!
//! `WEIR_HOSTILE_RUNS` sets the partitions per hostile plugin: 20 in the test command,
//! 1,000 in `scripts/hostile-campaign`.

use std::time::Instant;

use serde_json::Value as J;

use crate::harness::{TestDb, text};
use crate::plugins::{line, orders_table, plugin};

const PARALLELISM: u64 = 2;

/// Each hostile plugin that fails in `push`, its table's limits, and the text its
/// error carries.
const HOSTILE: [(&str, &str, &str); 7] = [
    (
        "hostile-loop",
        "plugin_fuel_per_call = 5000000\n",
        "CPU budget exceeded",
    ),
    (
        "hostile-alloc",
        "plugin_memory_mb = 64\n",
        "the cap is 67108864 bytes",
    ),
    ("hostile-recursion", "", "wasm stack overflow"),
    (
        "hostile-output",
        "plugin_output_mb = 16\n",
        "more than 16777216 bytes",
    ),
    (
        "hostile-memories",
        "plugin_memory_mb = 128\n",
        "the cap is 134217728 bytes",
    ),
    (
        "hostile-table",
        "plugin_memory_mb = 96\n",
        "the cap is 100663296 bytes",
    ),
    ("hostile-alias", "", "more than 134217728 bytes"),
];

fn runs() -> usize {
    std::env::var("WEIR_HOSTILE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// The day `n` days after 2020-01-01.
fn day(n: usize) -> String {
    (chrono::NaiveDate::from_ymd_opt(2020, 1, 1).expect("date") + chrono::Days::new(n as u64))
        .to_string()
}

#[test]
fn every_hostile_plugin_fails_alone_many_times_in_one_engine_within_its_budget() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let db = runtime.block_on(TestDb::new("plugin_hostile_campaign"));
    let runs = runs();
    let mut tables = orders_table(
        "public.orders",
        "analytics.orders_eur",
        &plugin("orders-rust"),
        "[table.plugin_config]\nrate = \"1\"\n",
    );
    for (name, limits, _) in HOSTILE {
        let t = name.replace('-', "_");
        tables.push_str(&orders_table(
            &format!("public.{t}"),
            &format!("analytics.{t}"),
            &plugin(name),
            limits,
        ));
    }
    db.write_feed_config(
        "",
        &format!("flush_interval_ms = 100\nparallelism = {PARALLELISM}"),
        &tables,
    );
    // Day by day, a good order then one row for each hostile table: the jobs of a
    // round (oldest change first) alternate between them.
    let mut feed = Vec::new();
    for d in 0..runs {
        let id = d as i64 + 1;
        feed.push(line("orders", "c", id, &day(d), "1.00", "new"));
        for (name, _, _) in HOSTILE {
            feed.push(line(
                &name.replace('-', "_"),
                "c",
                id,
                &day(d),
                "1.00",
                "new",
            ));
        }
    }
    db.write_feed(&feed);
    db.weir_ok(&["init"]);

    let started = Instant::now();
    let out = db
        .weir_command(&["--log-format", "json", "run", "--once"])
        .output()
        .expect("run weir");
    let elapsed = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the failed partitions fail the run: {}",
        text(&out.stdout)
    );
    // Each hostile job failed, with the error of its own limit.
    for (name, _, needle) in HOSTILE {
        let failures = stderr
            .lines()
            .filter(|l| l.contains(&format!("`{name}`")) && l.contains(needle))
            .count();
        assert!(
            failures >= runs,
            "{name}: {failures} failures naming `{needle}`, want {runs}"
        );
    }
    // The well-behaved table is whole, and no hostile table wrote a row.
    runtime.block_on(async {
        let n = db.count("SELECT count(*) FROM analytics.orders_eur").await;
        assert_eq!(n, runs as i64, "every good partition is written");
        for (name, _, _) in HOSTILE {
            let t = name.replace('-', "_");
            let n = db
                .count(&format!("SELECT count(*) FROM analytics.{t}"))
                .await;
            assert_eq!(n, 0, "{t} wrote nothing");
        }
    });
    // The budget the config states (`weir status`): RocksDB's, `parallelism` jobs each
    // at the largest memory cap (alias: the default 256 MiB) and output cap (128 MiB),
    // intake, and the process with each plugin's code.
    let peak = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<J>(l).ok())
        .find(|j| j["fields"]["message"] == "run ended")
        .and_then(|j| j["fields"]["peak_rss_kib"].as_u64())
        .unwrap_or_else(|| panic!("no `run ended` line:\n{stderr}"));
    let config = weir::config::Config::load(&db.config_path()).expect("config");
    let budget_mib = config.memory_budget().total >> 20;
    eprintln!(
        "hostile campaign: {} plugins x {runs} partitions in {elapsed:.1?}; peak RSS {} MiB, budget {budget_mib} MiB",
        HOSTILE.len(),
        peak / 1024
    );
    assert!(
        peak / 1024 < budget_mib,
        "peak RSS {} MiB over the budget of {budget_mib} MiB",
        peak / 1024
    );
}
