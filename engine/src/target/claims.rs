//! Which pipeline writes each target table (`weir.claims`): one target table, one
//! pipeline, and one stage of it.
//!
//! A pipeline is a source and a feed of it: `postgres:<system identifier>/<database>`
//! and `postgres:slot=<slot>`, or a JSON-lines file twice. A claim names the stage that
//! writes the table too: a second slot on the same database, a clone of the server
//! (whose slot of the same name is a slot made anew), or another database is another
//! pipeline; two stages of one slot are two writers.
//!
//! * `init` checks the claims of its tables before it makes anything (nothing written:
//!   a refused init leaves no claim), and claims them once its stage exists; the start
//!   of `run` claims them again. A table no one claimed is claimed (atomically: of two
//!   pipelines started at once, one is refused). One this stage claimed stays its own.
//!   One another stage of the same feed claimed moves to this stage at `init` when
//!   the slot exists (a new stage for the same slot: the old stage's writes are
//!   refused from then on), and at the first start of a stage that never claimed (a
//!   stage imported from a checkpoint); a slot made anew by this `init` (a lost slot,
//!   or a clone of the server) takes `--take-over`; any other start of a stage the
//!   table moved away from is refused. One claimed by another pipeline is refused,
//!   naming it, unless `weir init --take-over` says that pipeline is retired. A table
//!   inside another claimed table's partition tree (a child of a natively partitioned
//!   target, or its parent) is refused alike.
//! * Each partition write (alone or in a group) reads its table's claim under a share
//!   lock, in the write's transaction: a table moved away refuses the old stage's next
//!   write, and a move waits for the writes in flight.
//! * A slot is one pipeline's feed: a new stage whose slot is the feed of a stage that
//!   claims none of its tables is another pipeline sharing a slot by mistake (each
//!   would acknowledge changes the other never staged), and is refused. (A file, or
//!   stdin, may be read by any number of pipelines.)

use tokio_postgres::Client;

use super::{TargetError, query_err};
use crate::config::TableName;

/// When a claim is made, and what it may move.
#[derive(Debug, Clone, Copy)]
pub enum Moment {
    /// `weir init`: `take_over` (`--take-over`); `slot_made`: the feed starts anew (a
    /// PostgreSQL slot this init makes; a JSON-lines feed, which cannot be told from
    /// another of the same name).
    Init { take_over: bool, slot_made: bool },
    /// The start of `run`: `first`, the stage never claimed before.
    Start { first: bool },
}

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

/// Claims `targets` for `pipeline` at `moment` (see the module). Returns the tables
/// that no one claimed and that are now reserved for a stage not made yet (an empty
/// `stage_id`): [`release`] gives them back if the init fails.
pub async fn claim(
    client: &Client,
    targets: &[&TableName],
    pipeline: Pipeline<'_>,
    moment: Moment,
) -> Result<Vec<TableName>, TargetError> {
    refuse_shared_feed(client, targets, pipeline).await?;
    let mut reserved = Vec::new();
    for target in targets {
        refuse_claimed_relatives(client, target, pipeline).await?;
        if claim_one(client, target, pipeline, moment).await? && pipeline.stage_id.is_empty() {
            reserved.push((*target).clone());
        }
    }
    Ok(reserved)
}

/// Gives back the tables [`claim`] reserved for a stage that was not made (best effort:
/// logged if it fails; `weir init --take-over` moves such a claim).
pub async fn release(client: &Client, tables: &[TableName]) {
    let names: Vec<String> = tables.iter().map(ToString::to_string).collect();
    if let Err(error) = client
        .execute(
            "DELETE FROM weir.claims WHERE target_table = ANY($1) AND stage_id = ''",
            &[&names],
        )
        .await
    {
        tracing::warn!(error = %crate::pgerror::render(&error), "the target tables this refused init reserved were not given back: `weir init --take-over` of the right config moves them");
    }
}

/// What becomes of a table's claim.
enum Decision {
    Keep,
    Take,
    Refuse(TargetError),
}

/// What `pipeline` may do with the claim `claim` of `target` at `moment`. A pipeline
/// with no stage yet (`init` before it makes it) keeps what it would take: its claim is
/// made once the stage exists.
fn decide(target: &TableName, claim: &Claim, pipeline: &Pipeline<'_>, moment: Moment) -> Decision {
    let unmade = pipeline.stage_id.is_empty();
    let take = if unmade {
        Decision::Keep
    } else {
        Decision::Take
    };
    if !unmade && claim.stage_id == pipeline.stage_id {
        return Decision::Keep;
    }
    if claim.is(pipeline) {
        if claim.stage_id.is_empty() {
            return take;
        }
        return match moment {
            Moment::Init {
                take_over,
                slot_made,
            } if take_over || !slot_made => take,
            Moment::Start { first: true } => take,
            _ => Decision::Refuse(claimed_by_stage(target, claim, moment)),
        };
    }
    match moment {
        Moment::Init {
            take_over: true, ..
        } => take,
        _ => Decision::Refuse(claimed(target, claim, None)),
    }
}

/// Claims one table; `true` when it inserted a claim (no one had one).
async fn claim_one(
    client: &Client,
    target: &TableName,
    pipeline: Pipeline<'_>,
    moment: Moment,
) -> Result<bool, TargetError> {
    let name = target.to_string();
    let what = || format!("claim the target table {target}");
    // An INSERT or UPDATE that lost a race to another pipeline's reads its claim again.
    for _ in 0..3 {
        let claim = client
            .query_opt(
                &format!("SELECT {CLAIM_COLUMNS} FROM weir.claims WHERE target_table = $1"),
                &[&name],
            )
            .await
            .map_err(query_err(what()))?
            .map(|r| Claim::of(&r));
        let Some(claim) = claim else {
            let inserted = client
                .execute(
                    "INSERT INTO weir.claims (target_table, stage_id, source, feed) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (target_table) DO NOTHING",
                    &[&name, &pipeline.stage_id, &pipeline.source, &pipeline.feed],
                )
                .await
                .map_err(query_err(what()))?;
            if inserted == 1 {
                return Ok(true);
            }
            continue;
        };
        match decide(target, &claim, &pipeline, moment) {
            Decision::Keep => return Ok(false),
            Decision::Refuse(error) => return Err(error),
            Decision::Take => {
                let updated = client
                    .execute(
                        "UPDATE weir.claims SET stage_id = $2, source = $3, feed = $4, claimed_at = now() \
                         WHERE target_table = $1 AND stage_id = $5 AND source = $6 AND feed = $7",
                        &[
                            &name,
                            &pipeline.stage_id,
                            &pipeline.source,
                            &pipeline.feed,
                            &claim.stage_id,
                            &claim.source,
                            &claim.feed,
                        ],
                    )
                    .await
                    .map_err(query_err(what()))?;
                if updated == 1 {
                    if !claim.stage_id.is_empty() {
                        tracing::warn!(table = %target, from_feed = %claim.feed, from_source = %claim.source, from_stage = %claim.stage_id, "the target table is this stage's now: the writes of the stage it was taken from are refused");
                    }
                    return Ok(false);
                }
            }
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
        // Not moved by `--take-over`: the relative is another table of the tree,
        // whose claim stays its pipeline's, and each would delete the other's rows.
        if !claim.is(&pipeline) {
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
/// is claimed by the stage `stage_id` (or, claimed before a stage existed, by the
/// pipeline of `feed` and of the source `stage_id` was registered with; a table no one
/// claimed, as before this build, passes). The claim is read
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
                "SELECT {CLAIM_COLUMNS}, CASE WHEN stage_id <> '' THEN stage_id = $3 \
                   ELSE feed = $2 AND source = coalesce((SELECT s.source FROM weir.stages s WHERE s.stage_id = $3), source) END \
                 FROM weir.claims WHERE target_table = $1 FOR SHARE"
            ),
            &[&table.to_string(), &feed, &stage_id],
        )
        .await
        .map_err(query_err(format!("read the claim of {table}")))?;
    match row {
        Some(row) if !row.get::<_, bool>(4) => {
            let claim = Claim::of(&row);
            Err(if claim.feed == feed {
                claimed_by_stage(table, &claim, Moment::Start { first: false })
            } else {
                claimed(table, &claim, None)
            })
        }
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

/// Another stage of the same feed claims `table`.
fn claimed_by_stage(table: &TableName, claim: &Claim, moment: Moment) -> TargetError {
    let advice = match moment {
        Moment::Init { .. } => {
            "this init starts its feed anew (a slot it makes, or a JSON-lines file or stdin, which Weir cannot tell from another host's or another pipeline's): if this stage replaces that one (a lost slot, a stage made anew for the file), run `weir init --take-over`; if it is another pipeline (a clone of the source server, another producer's stdin, a copied config), give it its own targets"
        }
        Moment::Start { .. } => {
            "the table was moved to that stage (a new stage made for the slot, a checkpoint imported elsewhere, or `init --take-over` of another server's pipeline): this stage writes it no more. If this stage is the one that should, stop the other and run `weir init --take-over` here"
        }
    };
    TargetError::ClaimedByStage {
        table: table.clone(),
        by: format!(
            "stage {} of the same feed, {} of {}, claimed it at {}",
            claim.stage_id, claim.feed, claim.source, claim.claimed_at
        ),
        advice: advice.to_owned(),
    }
}

/// A configured target table another stage or pipeline claims (`weir status`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClaimStatus {
    pub table: String,
    pub stage_id: String,
    pub feed: String,
    pub source: String,
    pub claimed_at: String,
}

/// The claims of `targets` that name another stage than `stage_id` (for `status`).
pub async fn others(
    client: &Client,
    targets: &[String],
    stage_id: &str,
) -> Result<Vec<ClaimStatus>, TargetError> {
    Ok(client
        .query(
            &format!(
                "SELECT target_table, {CLAIM_COLUMNS} FROM weir.claims \
                 WHERE target_table = ANY($1) AND stage_id <> $2 AND stage_id <> '' ORDER BY 1"
            ),
            &[&targets, &stage_id],
        )
        .await
        .map_err(query_err("read the target tables' claims"))?
        .iter()
        .map(|r| ClaimStatus {
            table: r.get(0),
            stage_id: r.get(1),
            source: r.get(2),
            feed: r.get(3),
            claimed_at: r.get(4),
        })
        .collect())
}
