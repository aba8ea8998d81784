//! `weir demo`: a self-contained run on a throwaway local PostgreSQL.
//!
//! It starts a [`LocalPg`], writes a Debezium-style feed of orders, and drives the real
//! `weir` binary through `init`, `run --once` and `status`, then restates one order's
//! date and shows that both partitions were rewritten and the order exists once.
//! Everything it made is removed on exit (the cluster also on Ctrl-C or SIGKILL).

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::localpg::{LocalPg, LocalPgError, LocalPgOptions};

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start the local PostgreSQL")]
    LocalPg(#[from] LocalPgError),
    #[error("demo I/O failed")]
    Io(#[from] std::io::Error),
    #[error("`weir {command}` failed with {status}:\n{stderr}")]
    Step {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("query on the demo target failed")]
    Query(#[from] tokio_postgres::Error),
    #[error("the demo's check failed: {0}")]
    Check(String),
    #[error("a demo task stopped unexpectedly")]
    Task(#[from] tokio::task::JoinError),
}

/// A small deterministic pseudo-random sequence (xorshift64*), so the demo's and the
/// benchmarks' feeds are the same on every run without a clock or entropy.
#[derive(Debug, Clone)]
pub struct Sequence(u64);

impl Sequence {
    pub fn new(seed: u64) -> Sequence {
        Sequence(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One Debezium envelope line for `public.orders`.
pub fn order_line(
    op: char,
    tx: Option<u64>,
    id: u64,
    day: &str,
    amount_cents: u64,
    status: &str,
) -> String {
    let image = format!(
        "{{\"id\":{id},\"customer\":\"c{}\",\"order_date\":\"{day}\",\"amount\":\"{}.{:02}\",\"status\":\"{status}\"}}",
        id % 97,
        amount_cents / 100,
        amount_cents % 100
    );
    let (before, after) = if op == 'd' {
        (image, "null".to_owned())
    } else {
        ("null".to_owned(), image)
    };
    let tx = tx.map(|t| format!(",\"txId\":{t}")).unwrap_or_default();
    format!(
        "{{\"op\":\"{op}\",\"before\":{before},\"after\":{after},\"source\":{{\"schema\":\"public\",\"table\":\"orders\"{tx}}},\"ts_ms\":{}}}\n",
        1_772_323_200_000u64 + id * 1000
    )
}

/// The demo's config, reading `feed.jsonl` next to it.
pub const DEMO_CONFIG: &str = r#"# weir demo: Debezium JSON lines -> stage -> partitions of analytics.fact_orders
[source]
kind = "jsonl"
path = "feed.jsonl"
on_bad_record = "dead-letter"

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "WEIR_TARGET_DSN"

[[table]]
source = "public.orders"
target = "analytics.fact_orders"
key = ["id"]
partition_by = "order_date"
grain = "day"
columns = { id = "bigint", customer = "text", order_date = "date", amount = "numeric(12,2)", status = "text" }
"#;

const DAYS: [&str; 7] = [
    "2026-03-01",
    "2026-03-02",
    "2026-03-03",
    "2026-03-04",
    "2026-03-05",
    "2026-03-06",
    "2026-03-07",
];

/// Runs the demo, narrating to `out`. With `keep`, the cluster and files stay until
/// Ctrl-C, so the result can be queried.
pub async fn run(out: &mut impl Write, keep: bool) -> Result<(), DemoError> {
    writeln!(
        out,
        "weir demo: starting a throwaway PostgreSQL (data and socket in a temporary folder)..."
    )?;
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??;
    let dsn = pg.create_database("weir_demo").await?;
    writeln!(
        out,
        "  PostgreSQL listening on {}:{}, database weir_demo",
        pg.host(),
        pg.port()
    )?;

    let dir = tempfile::Builder::new().prefix("weir-demo-").tempdir()?;
    let config = dir.path().join("weir.toml");
    std::fs::write(&config, DEMO_CONFIG)?;
    let mut seq = Sequence::new(7);
    let mut feed = String::new();
    let orders = 2_000u64;
    for id in 1..=orders {
        // Orders arrive in small transactions of up to four lines.
        let day = DAYS[(id as usize * 7 / orders as usize).min(6)];
        feed.push_str(&order_line(
            'c',
            Some(id / 4),
            id,
            day,
            500 + seq.below(20_000),
            "new",
        ));
    }
    for _ in 0..300 {
        let id = 1 + seq.below(orders);
        let day = DAYS[(id as usize * 7 / orders as usize).min(6)];
        if id == 42 {
            continue;
        }
        feed.push_str(&order_line(
            'u',
            None,
            id,
            day,
            500 + seq.below(20_000),
            "shipped",
        ));
    }
    for id in (100..=orders).step_by(100) {
        let day = DAYS[(id as usize * 7 / orders as usize).min(6)];
        feed.push_str(&order_line('d', None, id, day, 0, "cancelled"));
    }
    feed.push_str("this line is not JSON: it goes to weir.dead_letter, not silently away\n");
    std::fs::write(dir.path().join("feed.jsonl"), &feed)?;
    writeln!(
        out,
        "\nwrote a Debezium JSON-lines feed of {} changes to {}",
        feed.lines().count(),
        dir.path().join("feed.jsonl").display()
    )?;
    writeln!(out, "config {}:\n{}", config.display(), indent(DEMO_CONFIG))?;

    weir(out, &config, &dsn, &["init"])?;
    weir(out, &config, &dsn, &["run", "--once"])?;
    let client = connect(&dsn).await?;
    show_partitions(out, &client, "partitions of analytics.fact_orders").await?;

    writeln!(
        out,
        "\nrestatement: order 42's date is corrected from 2026-03-01 to 2026-03-02"
    )?;
    let restatement = order_line('u', None, 42, "2026-03-02", 4_200, "corrected");
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("feed.jsonl"))?
        .write_all(restatement.as_bytes())?;
    weir(out, &config, &dsn, &["run", "--once"])?;
    let rows = client
        .query(
            "SELECT order_date::text, count(*) FROM analytics.fact_orders WHERE id = 42 GROUP BY 1",
            &[],
        )
        .await?;
    let placement: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    writeln!(
        out,
        "  order 42 is now in: {placement:?} (exactly once, old partition rewritten)"
    )?;
    if placement != [("2026-03-02".to_owned(), 1)] {
        return Err(DemoError::Check(format!(
            "order 42 should be once in 2026-03-02, found {placement:?}"
        )));
    }
    show_partitions(
        out,
        &client,
        "partitions after the restatement (both 03-01 and 03-02 rewritten)",
    )
    .await?;
    weir(out, &config, &dsn, &["run", "--once"])?;
    writeln!(
        out,
        "  (running again changes nothing: the feed position is staged)"
    )?;
    weir(out, &config, &dsn, &["status"])?;
    let dead = client
        .query("SELECT line, reason FROM weir.dead_letter ORDER BY id", &[])
        .await?;
    writeln!(out, "dead letters kept in weir.dead_letter: {}", dead.len())?;
    for r in &dead {
        let (line, reason): (Option<i64>, String) = (r.get(0), r.get(1));
        writeln!(out, "    line {}: {reason}", line.unwrap_or_default())?;
    }
    writeln!(
        out,
        "\nwhat to look at:\n  SELECT * FROM weir.partitions;          -- lineage: generation, position, row count, checksum\n  SELECT * FROM weir.dead_letter;         -- bad records with the reason and the raw line\n  SELECT order_date, count(*) FROM analytics.fact_orders GROUP BY 1;"
    )?;
    if keep {
        writeln!(
            out,
            "\nthe cluster stays up until Ctrl-C:\n  psql '{dsn}'\n  WEIR_TARGET_DSN='{dsn}' weir --config {} status",
            config.display()
        )?;
        out.flush()?;
        tokio::signal::ctrl_c().await?;
    } else {
        writeln!(
            out,
            "\n(run `weir demo --keep` to keep the cluster up and query it)"
        )?;
    }
    writeln!(out, "the demo's cluster and files are removed now. Done.")?;
    drop(client);
    drop(pg);
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().fold(String::new(), |mut acc, l| {
        let _ = writeln!(acc, "    {l}");
        acc
    })
}

/// Runs the real `weir` binary (this executable) with the demo's config.
fn weir(out: &mut impl Write, config: &Path, dsn: &str, args: &[&str]) -> Result<(), DemoError> {
    let exe = std::env::current_exe()?;
    writeln!(
        out,
        "\n$ weir --config {} {}",
        config.display(),
        args.join(" ")
    )?;
    let output = Command::new(exe)
        .arg("--config")
        .arg(config)
        .args(args)
        .env("WEIR_TARGET_DSN", dsn)
        .env("RUST_LOG", "warn")
        .output()?;
    write!(out, "{}", indent(&String::from_utf8_lossy(&output.stdout)))?;
    if !output.status.success() {
        return Err(DemoError::Step {
            command: args.join(" "),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(())
}

async fn connect(dsn: &str) -> Result<tokio_postgres::Client, DemoError> {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn show_partitions(
    out: &mut impl Write,
    client: &tokio_postgres::Client,
    title: &str,
) -> Result<(), DemoError> {
    let rows = client
        .query(
            "SELECT f.order_date::text, count(*), sum(f.amount)::text, p.stage_generation, p.checksum \
             FROM analytics.fact_orders f JOIN weir.partitions p ON p.partition = f.order_date::text AND p.target_table = 'analytics.fact_orders' \
             GROUP BY 1, 4, 5 ORDER BY 1",
            &[],
        )
        .await?;
    writeln!(
        out,
        "\n{title}:\n    partition    rows   amount       generation  checksum"
    )?;
    for r in rows {
        let (day, n, sum, generation, checksum): (String, i64, String, i64, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
        writeln!(
            out,
            "    {day}  {n:>5}  {sum:>11}  {generation:>10}  {}",
            &checksum[..12.min(checksum.len())]
        )?;
    }
    Ok(())
}
