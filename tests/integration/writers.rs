//! Writers of one target partition never overlap, in one process or across processes.
//! A probe trigger on the target table takes a second advisory lock per partition (in a
//! key space of its own) on every row written or deleted; a transaction that finds it
//! held by another, and still held 50 ms later, records an overlap. The probe is first shown to catch two bare
//! transactions writing one partition; then a live `weir run` with parallelism 4 and
//! repeated `weir backfill --parallel 4` processes write the same partitions while the
//! feed grows, and the probe must record none. A second `weir run` on the same config is
//! refused, naming the stage that is in use. The final target is exact.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::harness::{TestDb, Workload, assert_target_matches, text};

/// Installs the probe on `table` (partitioned by the date column `order_date`).
async fn install_probe(client: &Client, table: &str) {
    client
        .batch_execute(&format!(
            r#"
CREATE TABLE public.probe_log (partition text, overlap boolean, pid int, txid bigint, app text,
                               UNIQUE (partition, overlap, txid));
CREATE FUNCTION public.probe() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  p text := CASE WHEN TG_OP = 'DELETE' THEN OLD.order_date::text ELSE NEW.order_date::text END;
  got boolean := pg_try_advisory_xact_lock(hashtext('weir-probe'), hashtext(coalesce(p, '')));
BEGIN
  -- A writer that commits releases its locks one at a time: the partition's lock may be
  -- free (and taken by the next writer) a moment before the probe's. Only a probe lock
  -- still held a while later belongs to a transaction that is really still open.
  IF NOT got THEN
    PERFORM pg_sleep(0.05);
    got := pg_try_advisory_xact_lock(hashtext('weir-probe'), hashtext(coalesce(p, '')));
  END IF;
  IF got THEN
    INSERT INTO public.probe_log VALUES (p, false, pg_backend_pid(), txid_current(), current_setting('application_name')) ON CONFLICT DO NOTHING;
  ELSE
    INSERT INTO public.probe_log VALUES (p, true, pg_backend_pid(), txid_current(), current_setting('application_name')) ON CONFLICT DO NOTHING;
  END IF;
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER probe BEFORE INSERT OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION public.probe();
"#
        ))
        .await
        .expect("install the probe");
}

async fn overlaps(client: &Client) -> Vec<String> {
    client
        .query(
            "SELECT partition || ' (pid ' || pid || ', txid ' || txid || ')' FROM public.probe_log WHERE overlap ORDER BY 1",
            &[],
        )
        .await
        .expect("read the probe log")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_jobs_and_a_second_process_never_overlap_on_a_partition() {
    let db = TestDb::new("writers_overlap").await;
    let mut workload = Workload::new(47, 6);
    db.write_feed(&workload.lines(3_000, 4));
    db.write_config("", "", "flush_interval_ms = 100\nparallelism = 4");
    db.weir_ok(&["init"]);
    let client = db.client().await;
    install_probe(&client, "analytics.fact_orders").await;

    // The probe can fail: a second transaction writing a partition that an open one
    // has written is caught.
    let other = db.client().await;
    client
        .batch_execute(
            "INSERT INTO analytics.fact_orders VALUES (-3, 'probe', '2026-03-02', 0, 'x')",
        )
        .await
        .expect("seed row");
    client
        .batch_execute("BEGIN; DELETE FROM analytics.fact_orders WHERE id = -3")
        .await
        .expect("first writer");
    other
        .batch_execute(
            "BEGIN; INSERT INTO analytics.fact_orders VALUES (-2, 'probe', '2026-03-02', 0, 'x'); \
             DELETE FROM analytics.fact_orders WHERE id = -2; COMMIT",
        )
        .await
        .expect("second writer commits");
    client.batch_execute("ROLLBACK").await.expect("rollback");
    client
        .batch_execute("DELETE FROM analytics.fact_orders WHERE id = -3")
        .await
        .expect("remove the seed row");
    assert_eq!(
        overlaps(&client).await.len(),
        1,
        "the probe must catch two writers"
    );
    client
        .batch_execute("TRUNCATE public.probe_log")
        .await
        .expect("reset the probe");

    let log = db.path("run.log");
    let mut live = db.spawn_live(&[], &log);
    std::thread::sleep(Duration::from_millis(500));
    // A second engine on the same stage is refused, naming it.
    let second = db.weir(&["run", "--once"]);
    assert!(
        !second.status.success(),
        "a second weir run must be refused"
    );
    let stderr = text(&second.stderr);
    assert!(
        stderr.contains("cannot open the stage") && stderr.contains("another `weir run`"),
        "the refusal names the stage in use: {stderr}"
    );

    // Backfills of the whole window, 4 jobs each, beside the live engine's 4, while the
    // feed grows: every partition is written by both processes, many times.
    let started = Instant::now();
    let mut backfills = 0;
    while started.elapsed() < Duration::from_secs(12) {
        db.append_feed(&workload.lines(300, 4));
        // Its connections are named, so the probe log tells the processes apart.
        let out = db
            .weir_command(&[
                "backfill",
                "--table",
                "public.orders",
                "--from",
                "2026-03-01",
                "--to",
                "2026-03-07",
                "--parallel",
                "4",
            ])
            .env(
                "WEIR_TARGET_DSN",
                format!("{}?application_name=backfill", db.dsn),
            )
            .output()
            .expect("run weir backfill");
        assert!(
            out.status.success(),
            "backfill failed: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        backfills += 1;
    }
    db.wait_caught_up(60).await;
    live.kill().expect("stop");
    live.wait().expect("reap");

    let found = overlaps(&client).await;
    assert!(
        found.is_empty(),
        "overlapping writes of one partition: {found:?}"
    );
    // Both processes wrote partitions, many transactions each.
    let (live_writes, backfill_writes): (i64, i64) = client
        .query_one(
            "SELECT count(DISTINCT txid) FILTER (WHERE app <> 'backfill'), \
                    count(DISTINCT txid) FILTER (WHERE app = 'backfill') FROM public.probe_log",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .expect("probe log");
    assert!(
        live_writes >= 10 && backfill_writes >= 5,
        "the probe saw {live_writes} live and {backfill_writes} backfill transactions over {backfills} backfills"
    );
    assert_target_matches(&client, "analytics.fact_orders", &workload.model).await;
}

/// A `weir` command started beside a partition write in progress does not queue behind
/// it for Weir's own tables: with the `weir` schema already this build's, `init` and
/// `run` take no lock on `weir.partitions` or `weir.dead_letter` (their DDL took
/// `ACCESS EXCLUSIVE` locks on every start, and a second process starting beside a live
/// run's writes could deadlock with them). An open transaction holds the locks a
/// partition write holds; `init` and `run --once` must end while it stays open.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_started_beside_a_write_in_progress_does_not_wait_on_weirs_tables() {
    let db = TestDb::new("writers_schema_locks").await;
    let mut workload = Workload::new(48, 3);
    db.write_feed(&workload.lines(200, 4));
    db.write_config("", "", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let writing = db.client().await;
    writing
        .batch_execute("BEGIN; LOCK TABLE weir.partitions, weir.dead_letter IN ROW EXCLUSIVE MODE")
        .await
        .expect("hold a partition write's locks");
    db.append_feed(&workload.lines(50, 4));
    for args in [&["init"][..], &["run", "--once"][..]] {
        let mut child = db
            .weir_command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn weir");
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().expect("poll weir").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("reap weir");
                panic!(
                    "weir {args:?} waited on a lock of Weir's tables held by a write in progress: {}",
                    text(&out.stderr)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let out = child.wait_with_output().expect("reap weir");
        assert!(
            out.status.success(),
            "weir {args:?} failed beside a write in progress: {}",
            text(&out.stderr)
        );
    }
    writing
        .batch_execute("COMMIT")
        .await
        .expect("end the write");
    assert_target_matches(&writing, "analytics.fact_orders", &workload.model).await;
}
