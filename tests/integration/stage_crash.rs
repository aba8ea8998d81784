//! The stage under SIGKILL: `weir run` tails a growing feed (small transactions and
//! large ones that go through the pending area) and is killed at random moments, at
//! least 200 times. After each kill the stage opens, is consistent, and shows exactly
//! the feed's state at the stage's position: nothing missing, nothing extra.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use weir::config::Config;
use weir::stage::Stage;
use weir::value::Value;

use crate::harness::{Model, Order, Rng, TestDb, Workload, assert_target_matches, text};

/// Kills in the README's test command; `WEIR_CRASH_KILLS` runs a longer campaign.
const KILLS_DEFAULT: usize = 200;

/// The model of the feed's first `position` bytes, replayed from the JSON lines alone.
/// Positions only grow, so each call replays just the lines since the last one.
#[derive(Default)]
struct Replay {
    offset: u64,
    model: Model,
}

impl Replay {
    fn advance_to(&mut self, feed: &[u8], position: u64) -> &Model {
        assert!(
            position >= self.offset,
            "the stage position moved back from {} to {position}",
            self.offset
        );
        let pending = &feed[self.offset as usize..position as usize];
        for line in pending.split_inclusive(|b| *b == b'\n') {
            let v: serde_json::Value =
                serde_json::from_slice(line).expect("the test's own feed is JSON");
            let order = |image: &serde_json::Value| Order {
                id: image["id"].as_i64().expect("id"),
                customer: image["customer"].as_str().expect("customer").to_owned(),
                order_date: image["order_date"].as_str().map(str::to_owned),
                amount: image["amount"].as_str().expect("amount").to_owned(),
                status: image["status"].as_str().expect("status").to_owned(),
            };
            if v["op"].as_str() == Some("d") {
                self.model.rows.remove(&order(&v["before"]).id);
            } else {
                let o = order(&v["after"]);
                self.model.rows.insert(o.id, o);
            }
        }
        self.offset = position;
        &self.model
    }
}

/// What the stage shows for `public.orders`, with each row's partition checked.
fn staged(stage: &Stage) -> BTreeMap<i64, Order> {
    let mut out = BTreeMap::new();
    for (partition, row) in stage.table_rows("public.orders").expect("read staged rows") {
        let get = |name: &str| {
            row.values
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null)
        };
        let Value::Int(id) = get("id") else {
            panic!("integer id")
        };
        let order = Order {
            id,
            customer: get("customer").to_string(),
            order_date: Some(get("order_date").to_string()),
            amount: get("amount").to_string(),
            status: get("status").to_string(),
        };
        assert_eq!(
            Some(partition.name().as_ref()),
            order.order_date.as_deref(),
            "row {id} staged in the wrong partition"
        );
        assert!(out.insert(id, order).is_none(), "row {id} staged twice");
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_while_staging_at_least_200_times_loses_and_duplicates_nothing() {
    let kills_wanted: usize = std::env::var("WEIR_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KILLS_DEFAULT);
    let seed: u64 = std::env::var("WEIR_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261129);
    eprintln!(
        "stage crash test: seed {seed} (WEIR_CRASH_SEED reproduces the workload), {kills_wanted} kills"
    );
    let db = TestDb::new("stage_crash").await;
    db.write_config(
        "",
        "",
        "batch_transactions_max = 4\ntransaction_chunk_changes = 40\nflush_interval_ms = 150",
    );
    let mut workload = Workload::new(seed, 20);
    let mut rng = Rng::new(seed ^ 0x5eed);
    db.write_feed(&workload.lines(300, 5));
    db.weir_ok(&["init"]);
    let config = Config::load(&db.config_path()).expect("config");
    let (mut kills, mut large, mut checked_positions) = (0usize, 0usize, Vec::new());
    let mut replay = Replay::default();
    while kills < kills_wanted {
        let feed = std::fs::read(db.path("feed.jsonl")).expect("feed");
        let position = {
            let stage = Stage::open(&config.stage_path, &config.source_id())
                .expect("the stage opens after a kill");
            let position = stage
                .checkpoint()
                .expect("position")
                .map_or(0, |c| c.position);
            let want = replay.advance_to(&feed, position);
            let got = staged(&stage);
            let missing: Vec<_> = want
                .rows
                .keys()
                .filter(|id| !got.contains_key(id))
                .collect();
            let extra: Vec<_> = got
                .keys()
                .filter(|id| !want.rows.contains_key(id))
                .collect();
            let stale: Vec<_> = got
                .iter()
                .filter(|(id, o)| want.rows.get(id).is_some_and(|w| w != *o))
                .map(|(id, _)| id)
                .collect();
            assert!(
                missing.is_empty() && extra.is_empty() && stale.is_empty(),
                "after kill {kills} at position {position}: {} missing {:?}, {} extra {:?}, {} stale {:?} (seed {seed})",
                missing.len(),
                &missing[..missing.len().min(5)],
                extra.len(),
                &extra[..extra.len().min(5)],
                stale.len(),
                &stale[..stale.len().min(5)]
            );
            position
        };
        checked_positions.push(position);
        if position == feed.len() as u64 {
            // Keep the child busy: more small transactions, and now and then one large
            // enough to go through the pending area in several chunks.
            let mut more = workload.lines(200, 5);
            if kills % 3 == 0 {
                more.extend(workload.large_transaction(150 + rng.below(250) as usize));
                large += 1;
            }
            db.append_feed(&more);
        }
        let mut child = db
            .weir_command(&["run"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weir run");
        tokio::time::sleep(Duration::from_millis(50 + rng.below(500))).await;
        if child.try_wait().expect("poll").is_some() {
            let out = child.wait_with_output().expect("output");
            panic!(
                "weir run exited by itself ({}): {}",
                out.status,
                text(&out.stderr)
            );
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        kills += 1;
    }
    let progressed = checked_positions.windows(2).filter(|w| w[1] > w[0]).count();
    eprintln!(
        "stage crash test: {kills} kills, {large} large transactions, position advanced between {progressed} kills"
    );
    assert!(
        progressed > kills / 4,
        "kills should land while the feed is being staged"
    );
    assert!(large >= 10, "large transactions were part of the workload");
    // Drain, and the target is exact too.
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    assert_target_matches(&client, "analytics.fact_orders", &workload.model).await;
}
