//! Which pipeline writes each target table (`weir.claims`): one target table, one
//! pipeline.
//!
//! A pipeline is a source and a feed of it: `postgres:<system identifier>/<database>`
//! and `postgres:slot=<slot>`, or a JSON-lines file twice. Every stage of one pipeline
//! (a stage made anew for a new snapshot of the same slot, a checkpoint imported) is
//! that pipeline; a second slot on the same database, a clone of the server, or another
//! database is another pipeline, even for a source table of the same name.
//!
//! * `init` and the start of `run` claim each configured target table: a table no one
//!   claimed is claimed (atomically: of two pipelines started at once, one is
//!   refused); one claimed by this pipeline stays its own; one claimed by another is
//!   refused, naming it, unless `weir init --take-over` says that pipeline is retired.
//!   A table inside another claimed table's partition tree (a child of a natively
//!   partitioned target, or its parent) is refused alike.
//! * Each partition write reads its table's claim under a share lock, in the write's
//!   transaction: a table taken over while a pipeline ran refuses that pipeline's next
//!   write (and a take-over waits for the writes in flight).
//! * A slot is one pipeline's feed: a new stage whose slot is the feed of a stage that
//!   claims none of its tables is another pipeline sharing a slot by mistake (each
//!   would acknowledge changes the other never staged), and is refused. (A file, or
//!   stdin, may be read by any number of pipelines.)

use tokio_postgres::Client;

use super::{TargetError, query_err};
use crate::config::TableName;

/// A pipeline's identity: its source and its feed of it.
#[derive(Debug, Clone, Copy)]
pub struct Pipeline<'a> {
    /// The stage (`Stage::stage_id`; empty before `init` made it).
    pub stage_id: &'a str,
    /// The source (`postgres:<system identifier>/<database>`, or the feed for JSON lines).
    pub source: &'a str,
    /// The feed (`Config::source_id`: `postgres:slot=…`, `jsonl:<file>`, `jsonl:stdin`).
    pub feed: &'a str,
}

/// A target table's claim as recorded.
struct Claim {
    stage_id: String,
    source: String,
    feed: String,
    claimed_at: String,
}

impl Claim {
    fn of(row: &tokio_postgres::Row) -> Claim {
        Claim {
            stage_id: row.get(0),
            source: row.get(1),
            feed: row.get(2),
            claimed_at: row.get(3),
        }
    }

    fn is(&self, pipeline: &Pipeline<'_>) -> bool {
        self.source == pipeline.source && self.feed == pipeline.feed
    }
}

const CLAIM_COLUMNS: &str = "stage_id, source, feed, claimed_at::text";

/// Claims `targets` for `pipeline` (see the module). `take_over`: a table another
/// pipeline claimed becomes this one's (logged, with the one it was taken from).
pub async fn claim(
    client: &Client,
    targets: &[&TableName],
    pipeline: Pipeline<'_>,
    take_over: bool,
) -> Result<(), TargetError> {
    refuse_shared_feed(client, targets, pipeline).await?;
    for target in targets {
        refuse_claimed_relatives(client, target, pipeline, take_over).await?;
        claim_one(client, target, pipeline, take_over).await?;
    }
    Ok(())
}

async fn claim_one(
    client: &Client,
    target: &TableName,
    pipeline: Pipeline<'_>,
    take_over: bool,
) -> Result<(), TargetError> {
    let name = target.to_string();
    let what = || format!("claim the target table {target}");
    // An INSERT that lost a race to another pipeline's reads the winner's claim again.
    for _ in 0..3 {
        let claim = client
            .query_opt(
                &format!("SELECT {CLAIM_COLUMNS} FROM weir.claims WHERE target_table = $1"),
                &[&name],
            )
            .await
            .map_err(query_err(what()))?
            .map(|r| Claim::of(&r));
        match claim {
            None => {
                let inserted = client
                    .execute(
                        "INSERT INTO weir.claims (target_table, stage_id, source, feed) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (target_table) DO NOTHING",
                        &[&name, &pipeline.stage_id, &pipeline.source, &pipeline.feed],
                    )
                    .await
                    .map_err(query_err(what()))?;
                if inserted == 1 {
                    return Ok(());
                }
            }
            Some(claim) if claim.is(&pipeline) => {
                if claim.stage_id != pipeline.stage_id && !pipeline.stage_id.is_empty() {
                    client
                        .execute(
                            "UPDATE weir.claims SET stage_id = $2 WHERE target_table = $1",
                            &[&name, &pipeline.stage_id],
                        )
                        .await
                        .map_err(query_err(what()))?;
                }
                return Ok(());
            }
            Some(claim) if take_over => {
                let updated = client
                    .execute(
                        "UPDATE weir.claims SET stage_id = $2, source = $3, feed = $4, claimed_at = now() \
                         WHERE target_table = $1 AND source = $5 AND feed = $6",
                        &[
                            &name,
                            &pipeline.stage_id,
                            &pipeline.source,
                            &pipeline.feed,
                            &claim.source,
                            &claim.feed,
                        ],
                    )
                    .await
                    .map_err(query_err(what()))?;
                if updated == 1 {
                    tracing::warn!(table = %target, from_feed = %claim.feed, from_source = %claim.source, "took the target table over from another pipeline (--take-over): that pipeline's writes to it are refused from now on");
                    return Ok(());
                }
            }
            Some(claim) => return Err(claimed(target, &claim, None)),
        }
    }
    Err(TargetError::ClaimRace {
        table: target.clone(),
    })
}

/// Refuses `target` when a table of its partition tree (an ancestor or a descendant)
/// is claimed by another pipeline: a write of a parent deletes its children's rows,
/// and a write of a child deletes a partition of the parent.
async fn refuse_claimed_relatives(
    client: &Client,
    target: &TableName,
    pipeline: Pipeline<'_>,
    take_over: bool,
) -> Result<(), TargetError> {
    let rows = client
        .query(
            &format!(
                "WITH t AS (SELECT to_regclass($1) AS oid), \
                 relatives AS ( \
                   SELECT a.relid FROM t, pg_partition_ancestors(t.oid) a WHERE t.oid IS NOT NULL \
                   UNION SELECT d.relid FROM t, pg_partition_tree(t.oid) d WHERE t.oid IS NOT NULL) \
                 SELECT n.nspname::text, c.relname::text, {CLAIM_COLUMNS} \
                 FROM relatives r JOIN t ON r.relid <> t.oid \
                 JOIN pg_class c ON c.oid = r.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 JOIN weir.claims w ON w.target_table = n.nspname || '.' || c.relname"
            ),
            &[&target.quoted()],
        )
        .await
        .map_err(query_err(format!(
            "read the partition tree of the target table {target}"
        )))?;
    for row in rows {
        let relative = TableName {
            schema: row.get(0),
            name: row.get(1),
        };
        let claim = Claim {
            stage_id: row.get(2),
            source: row.get(3),
            feed: row.get(4),
            claimed_at: row.get(5),
        };
        if !claim.is(&pipeline) && !take_over {
            return Err(claimed(target, &claim, Some(&relative)));
        }
    }
    Ok(())
}

/// Refuses a new stage whose feed (its slot) is the feed of a stage that claims none
/// of `targets`: two pipelines sharing one slot by mistake.
async fn refuse_shared_feed(
    client: &Client,
    targets: &[&TableName],
    pipeline: Pipeline<'_>,
) -> Result<(), TargetError> {
    // A file or stdin is read by as many pipelines as like; a slot is streamed by one.
    if !pipeline.feed.starts_with("postgres:") {
        return Ok(());
    }
    let names: Vec<String> = targets.iter().map(ToString::to_string).collect();
    let row = client
        .query_opt(
            "SELECT stage_id, string_agg(target_table, ', ' ORDER BY target_table) FROM weir.claims \
             WHERE source = $1 AND feed = $2 AND stage_id <> $3 AND stage_id <> '' \
             GROUP BY stage_id HAVING NOT bool_or(target_table = ANY($4)) LIMIT 1",
            &[&pipeline.source, &pipeline.feed, &pipeline.stage_id, &names],
        )
        .await
        .map_err(query_err("read the target tables' claims"))?;
    match row {
        None => Ok(()),
        Some(row) => Err(TargetError::SharedFeed {
            feed: pipeline.feed.to_owned(),
            stage: row.get(0),
            tables: row.get(1),
        }),
    }
}

/// Fails a write (in `tx`, which the partition's lock holds) unless the target table
/// is claimed by the pipeline of `feed` and of the source `stage_id` was registered
/// with (a table no one claimed, as before this build, passes). The claim is read
/// under a share lock: a take-over waits for the write.
pub(super) async fn check_claim(
    tx: &tokio_postgres::Transaction<'_>,
    table: &TableName,
    feed: &str,
    stage_id: &str,
) -> Result<(), TargetError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT {CLAIM_COLUMNS}, feed = $2 AND source = coalesce((SELECT s.source FROM weir.stages s WHERE s.stage_id = $3), source) \
                 FROM weir.claims WHERE target_table = $1 FOR SHARE"
            ),
            &[&table.to_string(), &feed, &stage_id],
        )
        .await
        .map_err(query_err(format!("read the claim of {table}")))?;
    match row {
        Some(row) if !row.get::<_, bool>(4) => Err(claimed(table, &Claim::of(&row), None)),
        _ => Ok(()),
    }
}

fn claimed(table: &TableName, claim: &Claim, through: Option<&TableName>) -> TargetError {
    let stage = if claim.stage_id.is_empty() {
        String::new()
    } else {
        format!(" (stage {})", claim.stage_id)
    };
    TargetError::Claimed {
        table: table.clone(),
        through: through.map_or(String::new(), |t| {
            format!(" (through {t}, in the same partition tree)")
        }),
        by: format!(
            "{} of {}{stage} claimed it at {}",
            claim.feed, claim.source, claim.claimed_at
        ),
    }
}
