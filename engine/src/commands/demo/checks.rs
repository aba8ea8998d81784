//! The demo's checks, each real (a failed one fails the demo): the engine caught up
//! with the source, the target is exactly the plugin's output for the source's rows,
//! and a restatement rewrites both partitions.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use weir::pg::lsn::{format_lsn, parse_lsn};

use super::engine::{LiveRun, Weir};
use super::estate::Db;
use super::{
    CATCH_UP_TIMEOUT_S, DAYS, DemoError, POLL_INTERVAL_MS, RATE, SLOT, SLOT_RELEASE_TIMEOUT_S,
    TARGET_TABLE,
};

/// Waits until no walsender holds the slot (a killed engine's is gone), bounded.
pub(super) async fn wait_slot_released(source: &Db) -> Result<(), DemoError> {
    let deadline = Instant::now() + Duration::from_secs(SLOT_RELEASE_TIMEOUT_S);
    while Instant::now() < deadline {
        let active: Option<bool> = source
            .client
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&SLOT],
            )
            .await
            .map_err(source.err())?
            .map(|r| r.get(0));
        if active != Some(true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Writes a mark into the source's WAL after everything committed so far, and waits
/// until the live engine has staged past it (a commit at or after the mark, and so
/// every commit before it) and written every dirty partition. Returns how long it took.
pub(super) async fn catch_up(
    weir: &Weir,
    source: &Db,
    live: &mut LiveRun,
) -> Result<Duration, DemoError> {
    let started = Instant::now();
    let row = source
        .client
        .query_one(
            "SELECT pg_logical_emit_message(true, 'weir.demo.mark', '')::text",
            &[],
        )
        .await
        .map_err(source.err())?;
    let mark_text: String = row.get(0);
    let mark = parse_lsn(&mark_text)
        .ok_or_else(|| DemoError::Check(format!("the source returned LSN {mark_text:?}")))?;
    let deadline = started + Duration::from_secs(CATCH_UP_TIMEOUT_S);
    loop {
        live.check_alive()?;
        let status = weir.status().await?;
        if let Some(failed) = status["failed_partitions"]
            .as_array()
            .filter(|f| !f.is_empty())
        {
            return Err(DemoError::Check(format!(
                "partitions failed: {}",
                Json::Array(failed.clone())
            )));
        }
        let staged = status["position"].as_u64().is_some_and(|p| p >= mark);
        let clean = status["dirty_partitions"]
            .as_array()
            .is_some_and(Vec::is_empty);
        if staged && clean {
            return Ok(started.elapsed());
        }
        if Instant::now() > deadline {
            return Err(DemoError::Check(format!(
                "weir run did not catch up with the source (mark {}) within {CATCH_UP_TIMEOUT_S} s: {status}",
                format_lsn(mark)
            )));
        }
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
    }
}

/// The source's orders (negative amounts apart) and the target's rows, as text, by id.
type SourceRow = (i64, Option<String>, Option<String>, String, Option<String>);
type TargetRow = (
    i64,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
);

/// The check after a kill: the target is exactly the plugin's output for the source's
/// rows: the same ids (none missing, none extra, none twice), each column as the
/// source has it, `amount_eur` = amount × rate, and every rejected row dead-lettered.
pub(super) async fn check_target(
    out: &mut impl Write,
    source: &Db,
    target: &Db,
) -> Result<(), DemoError> {
    // A digest of the shared columns, as benches' `digest`; the plugin upper-cases status.
    const DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, customer, \
         order_date, amount, {status}), ',' ORDER BY id), '')) FROM {table}";
    let digest =
        |status: &str, table: &str| DIGEST.replace("{status}", status).replace("{table}", table);
    let src = source
        .client
        .query_one(&digest("upper(status)", "orders WHERE amount >= 0"), &[])
        .await
        .map_err(source.err())?;
    let tgt = target
        .client
        .query_one(&digest("status", TARGET_TABLE), &[])
        .await
        .map_err(target.err())?;
    let (src_rows, src_md5): (i64, String) = (src.get(0), src.get(1));
    let (tgt_rows, tgt_md5): (i64, String) = (tgt.get(0), tgt.get(1));
    writeln!(
        out,
        "  source  orders (amount >= 0)   {src_rows:>6} rows  md5 {src_md5}"
    )?;
    writeln!(
        out,
        "  target  {TARGET_TABLE:<22} {tgt_rows:>6} rows  md5 {tgt_md5}"
    )?;

    let source_rows: Vec<SourceRow> = source
        .client
        .query(
            "SELECT id, customer, order_date::text, amount::text, status FROM orders ORDER BY id",
            &[],
        )
        .await
        .map_err(source.err())?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let target_rows: Vec<TargetRow> = target
        .client
        .query(
            &format!(
                "SELECT id, customer, order_date::text, amount::text, amount_eur::text, status \
                 FROM {TARGET_TABLE} ORDER BY id"
            ),
            &[],
        )
        .await
        .map_err(target.err())?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect();
    let rejected_keys: Vec<String> = target
        .client
        .query(
            "SELECT row_key::text FROM weir.dead_letter WHERE kind = 'rejected' ORDER BY 1",
            &[],
        )
        .await
        .map_err(target.err())?
        .iter()
        .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
        .collect();
    let report = compare(&source_rows, &target_rows, &rejected_keys);
    writeln!(
        out,
        "  amount_eur = amount x {RATE}, rounded half to even: exact on {} of {} rows",
        report.eur_exact,
        target_rows.len()
    )?;
    writeln!(
        out,
        "  missing {}, extra {}, different {}; rejected rows in weir.dead_letter: {} of {}",
        report.missing.len(),
        report.extra.len(),
        report.different.len(),
        report.rejected_found,
        report.rejected_expected
    )?;
    if src_md5 != tgt_md5 || src_rows != tgt_rows || !report.is_exact() {
        return Err(DemoError::Check(format!(
            "the target is not the source's rows after the kill: missing ids {:?}, extra ids {:?}, \
             different ids {:?}, {} of {} rejected rows dead-lettered, digests {src_md5} / {tgt_md5}",
            report.missing,
            report.extra,
            report.different,
            report.rejected_found,
            report.rejected_expected
        )));
    }
    writeln!(
        out,
        "  ok: the target equals the source, nothing lost and nothing duplicated across the SIGKILL"
    )?;
    Ok(())
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Comparison {
    missing: Vec<i64>,
    extra: Vec<i64>,
    different: Vec<i64>,
    eur_exact: usize,
    rejected_expected: usize,
    rejected_found: usize,
}

impl Comparison {
    fn is_exact(&self) -> bool {
        self.missing.is_empty()
            && self.extra.is_empty()
            && self.different.is_empty()
            && self.rejected_found == self.rejected_expected
    }
}

/// Compares the source's rows (by id, ascending) through the orders plugin's rules
/// with the target's rows (by id, ascending; a duplicate id counts as extra) and the
/// dead-lettered keys (`[id]` as JSON text).
fn compare(source: &[SourceRow], target: &[TargetRow], rejected_keys: &[String]) -> Comparison {
    let mut report = Comparison::default();
    let mut t = target.iter().peekable();
    for (id, customer, day, amount, status) in source {
        if amount.starts_with('-') {
            report.rejected_expected += 1;
            if rejected_keys.iter().any(|k| k == &format!("[{id}]")) {
                report.rejected_found += 1;
            }
            continue;
        }
        while let Some(row) = t.next_if(|row| row.0 < *id) {
            report.extra.push(row.0);
        }
        let Some(row) = t.next_if(|row| row.0 == *id) else {
            report.missing.push(*id);
            continue;
        };
        let eur = amount_eur(amount, RATE);
        if row.4.is_some() && row.4 == eur {
            report.eur_exact += 1;
        }
        let upper = status.as_deref().map(str::to_ascii_uppercase);
        if (&row.1, &row.2, &row.3, &row.4, &row.5) != (customer, day, amount, &eur, &upper) {
            report.different.push(*id);
        }
        while let Some(dup) = t.next_if(|row| row.0 == *id) {
            report.extra.push(dup.0);
        }
    }
    report.extra.extend(t.map(|row| row.0));
    report
}

/// `amount × rate` rounded once to 2 places, half to even, as the orders plugin
/// computes it (exact: decimal texts, integer arithmetic). `None` if either is not a
/// plain non-negative decimal or the product does not fit.
fn amount_eur(amount: &str, rate: &str) -> Option<String> {
    fn parse(text: &str) -> Option<(i128, u32)> {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        if int.is_empty() || !(int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())) {
            return None;
        }
        let scale = u32::try_from(frac.len()).ok()?;
        Some((format!("{int}{frac}").parse().ok()?, scale))
    }
    let (a, a_scale) = parse(amount)?;
    let (r, r_scale) = parse(rate)?;
    let product = a.checked_mul(r)?;
    let scale = a_scale + r_scale;
    let cents = if scale <= 2 {
        product.checked_mul(10i128.checked_pow(2 - scale)?)?
    } else {
        let unit = 10i128.checked_pow(scale - 2)?;
        let (q, rem) = (product / unit, product % unit);
        let half = unit / 2;
        if rem > half || (rem == half && q % 2 == 1) {
            q + 1
        } else {
            q
        }
    };
    Some(format!("{}.{:02}", cents / 100, cents % 100))
}

/// Lineage of one partition: (stage generation, source position, rows).
async fn lineage(target: &Db, partition: &str) -> Result<Option<(i64, i64, i64)>, DemoError> {
    let row = target
        .client
        .query_opt(
            "SELECT stage_generation, source_position, row_count FROM weir.partitions \
             WHERE target_table = $1 AND partition = $2",
            &[&TARGET_TABLE, &partition],
        )
        .await
        .map_err(target.err())?;
    Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
}

/// Moves one order to another day at the source, waits for the engine, and checks
/// that both partitions were rewritten and the order is in the target once, in the
/// new one.
pub(super) async fn restatement(
    out: &mut impl Write,
    weir: &Weir,
    source: &Db,
    target: &Db,
    live: &mut LiveRun,
) -> Result<(), DemoError> {
    let (old_day, new_day) = (DAYS[1], DAYS[4]);
    let row = source
        .client
        .query_opt(
            "SELECT id FROM orders WHERE order_date = $1::text::date AND amount >= 0 ORDER BY id LIMIT 1",
            &[&old_day],
        )
        .await
        .map_err(source.err())?
        .ok_or_else(|| DemoError::Check(format!("no order on {old_day} to restate")))?;
    let id: i64 = row.get(0);
    let before = (
        lineage(target, old_day).await?,
        lineage(target, new_day).await?,
    );
    let sql = format!("UPDATE orders SET order_date = '{new_day}' WHERE id = {id}");
    writeln!(out, "  source: {sql};")?;
    source.batch(&sql).await?;
    catch_up(weir, source, live).await?;
    let after = (
        lineage(target, old_day).await?,
        lineage(target, new_day).await?,
    );
    writeln!(
        out,
        "  {:<12} {:>28}   {:>28}",
        "partition", "lineage before (gen, pos, rows)", "after"
    )?;
    let show = |l: Option<(i64, i64, i64)>| {
        l.map_or_else(
            || "(not written)".to_owned(),
            |(g, p, n)| {
                format!(
                    "{g}, {}, {n}",
                    u64::try_from(p).map_or_else(|_| p.to_string(), format_lsn)
                )
            },
        )
    };
    for (day, b, a) in [(old_day, before.0, after.0), (new_day, before.1, after.1)] {
        writeln!(out, "  {day:<12} {:>28}   {:>28}", show(b), show(a))?;
    }
    let rewritten = |b: Option<(i64, i64, i64)>, a: Option<(i64, i64, i64)>| match (b, a) {
        (Some(b), Some(a)) => a.0 != b.0 && a.1 > b.1,
        (None, Some(_)) => true,
        _ => false,
    };
    let both = rewritten(before.0, after.0) && rewritten(before.1, after.1);
    let placement: Vec<String> = target
        .client
        .query(
            &format!("SELECT order_date::text FROM {TARGET_TABLE} WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(target.err())?
        .iter()
        .map(|r| r.get(0))
        .collect();
    writeln!(
        out,
        "  order {id} in the target: {} row(s), in {}",
        placement.len(),
        placement.join(", ")
    )?;
    if !both {
        return Err(DemoError::Check(format!(
            "the restatement of order {id} did not rewrite both {old_day} and {new_day}"
        )));
    }
    if placement != [new_day] {
        return Err(DemoError::Check(format!(
            "order {id} should be in the target once, in {new_day}; found {placement:?}"
        )));
    }
    writeln!(
        out,
        "  ok: both partitions rewritten, the order is in the target exactly once, in the new partition"
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amount_eur_rounds_once_half_to_even() {
        assert_eq!(amount_eur("0.05", "0.5").as_deref(), Some("0.02"));
        assert_eq!(amount_eur("0.15", "0.5").as_deref(), Some("0.08"));
        assert_eq!(amount_eur("1.50", "0.9175").as_deref(), Some("1.38"));
        assert_eq!(amount_eur("100.00", "0.9175").as_deref(), Some("91.75"));
        assert_eq!(amount_eur("7", "2").as_deref(), Some("14.00"));
        assert_eq!(amount_eur("0.00", "0.9175").as_deref(), Some("0.00"));
        assert_eq!(amount_eur("-1.00", "0.9175"), None);
        assert_eq!(amount_eur("1e3", "1"), None);
    }

    #[test]
    fn the_comparison_reports_missing_extra_different_and_rejected_separately() {
        let s = |id: i64, amount: &str| -> SourceRow {
            (
                id,
                Some("c1".into()),
                Some("2026-03-01".into()),
                amount.into(),
                Some("new".into()),
            )
        };
        let t = |id: i64, amount: &str, eur: &str| -> TargetRow {
            (
                id,
                Some("c1".into()),
                Some("2026-03-01".into()),
                amount.into(),
                Some(eur.into()),
                Some("NEW".into()),
            )
        };
        let source = [s(1, "10.00"), s(2, "20.00"), s(3, "-1.00"), s(4, "40.00")];
        let exact = [
            t(1, "10.00", "9.18"),
            t(2, "20.00", "18.35"),
            t(4, "40.00", "36.70"),
        ];
        let report = compare(&source, &exact, &["[3]".into()]);
        assert!(report.is_exact(), "{report:?}");
        assert_eq!(report.eur_exact, 3);
        let wrong = [
            t(1, "10.00", "9.17"),
            t(4, "40.00", "36.70"),
            t(4, "40.00", "36.70"),
            t(5, "1.00", "0.92"),
        ];
        let report = compare(&source, &wrong, &[]);
        assert_eq!(report.missing, [2]);
        assert_eq!(report.extra, [4, 5]);
        assert_eq!(report.different, [1]);
        assert_eq!((report.rejected_expected, report.rejected_found), (1, 0));
        assert!(!report.is_exact());
    }
}
