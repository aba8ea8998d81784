//! `init`, and the checks every open repeats: the configured tables resolved against
//! the source and target, and their contracts reconciled with the stage's.

use crate::pgerror::PgError;
use tokio_postgres::Client;

use super::{PipelineError, Transform, blocking, plugin_host};
use crate::config::{Config, Dsn, SourceConfig, TableConfig, TableName};
use crate::source::postgres::{self, PgSourceError};
use crate::stage::{Stage, TableContract};
use crate::target;

/// What `init` found and did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    pub stage: String,
    /// What was set up in the source (publication, slot, replica identities).
    pub source: Vec<String>,
    pub tables: Vec<String>,
}

/// Validates connectivity and creates what is missing: the stage, the target's `weir`
/// schema, and each target table (or refuses one that does not match). Safe to re-run.
pub async fn init(config: &Config, dsn: &Dsn) -> Result<InitReport, PipelineError> {
    init_with(config, dsn, InitOptions::default()).await
}

/// What `weir init`'s flags allow beyond [`init`].
#[derive(Debug, Clone, Copy, Default)]
pub struct InitOptions {
    /// Add declared nullable columns an existing target table lacks
    /// (`--allow-add-columns`).
    pub allow_add_columns: bool,
    /// Record a PostgreSQL publication altered since the stage last read it
    /// (`--accept-publication`).
    pub accept_publication: bool,
    /// Take the configured target tables over from the pipeline that claims them
    /// (`--take-over`: [`target::claims`]).
    pub take_over: bool,
}

/// [`init`], adding declared nullable columns an existing target table lacks when
/// `allow_add_columns` (`weir init --allow-add-columns`); recording a PostgreSQL
/// publication altered since the stage last read it when `accept_publication` (`weir
/// init --accept-publication`), which it refuses otherwise (see
/// [`postgres::PublicationMark`]).
pub async fn init_with(
    config: &Config,
    dsn: &Dsn,
    options: InitOptions,
) -> Result<InitReport, PipelineError> {
    let InitOptions {
        allow_add_columns,
        accept_publication,
        take_over,
    } = options;
    let mut source_lines = Vec::new();
    let mut publication_mark = None;
    if let SourceConfig::Jsonl {
        path: Some(path), ..
    } = &config.source
    {
        crate::source::jsonl::refuse_unseekable(path)?;
    }
    let Resolved {
        tables: resolved,
        source,
        ..
    } = resolve_tables(config, None).await?;
    // Whether this init starts a feed anew: a slot of a claimed feed made anew (a lost
    // slot, or a clone of the server) moves the claim only with `--take-over`.
    let slot_made = match &config.source {
        SourceConfig::Postgres { slot, .. } => {
            let client = postgres::connect(&postgres_dsn(config)?).await?;
            client
                .query_opt(
                    "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                    &[slot],
                )
                .await
                .map_err(|source| postgres::PgSourceError::Query {
                    what: "look up the replication slot",
                    source: PgError(source),
                })?
                .is_none()
        }
        // A file's new stage is not told from another host's file of the same path,
        // nor stdin from another stdin: as a slot made anew, `--take-over` moves it.
        SourceConfig::Jsonl { .. } => true,
    };
    let claim_moment = target::claims::Moment::Init {
        take_over,
        slot_made,
    };
    // Before anything is made in the source: a target table another pipeline writes.
    let reserved = {
        let target = target::connect(dsn).await?;
        target::ensure_weir_schema(&target).await?;
        let stage_id = if crate::stage::stage_exists(&config.stage_path)? {
            let path = config.stage_path.clone();
            blocking(move || Stage::open_read_only(&path)?.stage_id()).await?
        } else {
            String::new()
        };
        for table in &resolved {
            refuse_foreign_lineage(&target, table, &stage_id, &source).await?;
            // With a plugin, the target's partition column is its output's.
            let column = table
                .plugin
                .is_none()
                .then_some(table.partition_by.as_str());
            refuse_other_partitioning(&target, table, column, &stage_id, &source).await?;
        }
        refuse_overlapping_targets(config, &target, &resolved, &source).await?;
        // Tables no one claims are reserved for this stage (atomically: of two inits at
        // once, one is refused), the rest checked; bound to the stage once it exists.
        let targets: Vec<&TableName> = resolved.iter().map(|t| &t.target).collect();
        let feed = config.source_id();
        let pipeline = target::claims::Pipeline {
            stage_id: &stage_id,
            source: &source,
            feed: &feed,
        };
        target::claims::claim(&target, &targets, pipeline, claim_moment).await?
    };
    // The rest: an init refused from here releases the tables it reserved.
    let result: Result<InitReport, PipelineError> = async {
        let mut oids = vec![None; resolved.len()];
        if let SourceConfig::Postgres {
            slot, publication, ..
        } = &config.source
        {
            let source_dsn = postgres_dsn(config)?;
            let client = postgres::connect(&source_dsn).await?;
            refuse_lost_slot(config, &client, slot).await?;
            let primary = postgres::write_server(&client, primary_dsn(config)?.as_ref()).await?;
            let waits = postgres::report_slot_waits(&source_dsn);
            let report = postgres::setup(&client, primary.as_ref(), slot, publication, &resolved).await;
            waits.abort();
            let report = report?;
            source_lines.push(format!(
                "publication {publication} ({}), slot {slot} ({})",
                if report.created_publication {
                    "created"
                } else {
                    "exists"
                },
                if report.created_slot {
                    "created"
                } else {
                    "exists"
                }
            ));
            source_lines.push(format!("slot {slot}: {}", report.failover));
            oids = report.oids.iter().copied().map(Some).collect();
            publication_mark = Some((
                publication.clone(),
                postgres::PublicationMark::read(&client, publication, &resolved, &report.oids).await?,
            ));
            for (table, identity) in report.identities {
                source_lines.push(format!("replica identity of {table}: {identity}"));
            }
        }
        let mut client = target::connect(dsn).await?;
        target::ensure_weir_schema(&client).await?;
        let host = plugin_host();
        let mut tables = Vec::new();
        let mut contracts = Vec::with_capacity(resolved.len());
        for (table, oid) in resolved.iter().zip(&oids) {
            let transform = Transform::load(&host, table).await?;
            check_write_mode(config, table, &transform)?;
            contracts.push(contract_of(table, &transform, *oid));
            let view = transform.target_view(table);
            check_partition_column(table, &view);
            refuse_output_grain(config, table, &view)?;
            let prepared = target::prepare_table(
                &mut client,
                &view,
                if allow_add_columns {
                    target::Prepare::CreateOrAddColumns
                } else {
                    target::Prepare::Create
                },
            )
            .await?;
            tables.push(format!(
                "{} -> {} ({} columns, partition by {} {}{}; transform {})",
                table.source,
                prepared.name,
                prepared.columns.len(),
                table.partition_by,
                table.grain,
                if view.partition_by == table.partition_by {
                    String::new()
                } else {
                    format!(", the plugin's column {}", view.partition_by)
                },
                transform.label()
            ));
        }
        // Again once made: a native target's children are made by it.
        refuse_overlapping_targets(config, &client, &resolved, &source).await?;
        let path = config.stage_path.clone();
        let source_id = config.source_id();
        let stage = blocking(move || Stage::open(&path, &source_id)).await?;
        {
            let targets: Vec<&TableName> = resolved.iter().map(|t| &t.target).collect();
            let (stage_id, feed) = (stage.stage_id()?, config.source_id());
            let pipeline = target::claims::Pipeline {
                stage_id: &stage_id,
                source: &source,
                feed: &feed,
            };
            target::claims::claim(&client, &targets, pipeline, claim_moment).await?;
            stage.set_claimed()?;
        }
        for table in reconcile_contracts(config, &stage, &contracts, true)? {
            tracing::info!(table = %table, "the table is back in the config: `weir run` reads it whole again as it starts");
        }
        if let Some((publication, mark)) = publication_mark {
            let changed = stage
                .publication_mark()?
                .as_deref()
                .and_then(postgres::PublicationMark::decode)
                .and_then(|earlier| mark.changed_since(&earlier));
            if let Some(what) = changed {
                if !accept_publication {
                    return Err(postgres::PublicationMark::changed_error(&publication, &what).into());
                }
                tracing::warn!(publication = %publication, changed = %what, "the publication's alteration is accepted: changes it hid while it was altered are not in the stage; `weir resync --table T` re-reads a table");
            }
            stage.set_publication_mark(&mark.encode())?;
        }
        Ok(InitReport {
            stage: config.stage_path.display().to_string(),
            source: source_lines,
            tables,
        })
    }
    .await;
    if result.is_err() && !reserved.is_empty() {
        target::claims::release(&target::connect(dsn).await?, &reserved).await;
    }
    result
}

pub(super) fn check_write_mode(
    config: &Config,
    table: &TableConfig,
    transform: &Transform,
) -> Result<(), PipelineError> {
    transform
        .check_write_mode(table)
        .map_err(|message| PipelineError::Table {
            config: config.path.clone(),
            table: table.source.to_string(),
            field: "write",
            message,
        })
}

/// A table's contract as the config states it.
pub(super) fn contract_of(
    table: &TableConfig,
    transform: &Transform,
    oid: Option<u32>,
) -> TableContract {
    TableContract {
        source: table.source.to_string(),
        source_oid: oid,
        target: table.target.to_string(),
        key: table.key.clone(),
        partition_by: table.partition_by.clone(),
        grain: table.grain.to_string(),
        transform: transform.contract_id(),
        out_of_config: false,
    }
}

/// What reconciling the config with the stage's contracts does to the stage.
enum ContractStep {
    /// A table new to the stage, or a contract recorded anew (a plugin changed, the
    /// source's OID learnt).
    Put(TableContract),
    /// The same source table under a new name: move its entries.
    Rename { from: String, to: TableContract },
}

/// Compares each configured table's contract with the stage's; refuses a config that
/// changes a table's key, partition column, grain or target, or whose source table is
/// another relation than the one staged (dropped and created again). Records the
/// contracts of tables new to the stage (a stage of an older build adopts the
/// config's), a changed transform (partitions written by the old one are listed as
/// stale by lineage; `weir backfill --stale` rewrites them: a plugin upgrade is a
/// normal operation, not a new feed), and carries a renamed table's staged entries
/// to its new name (same relation OID). `writable`: `false` only checks.
///
/// A staged table the config no longer reads is marked out of the config: its changes
/// are passed over from now on. Returns the configured tables so marked, put back in
/// the config since: they stay marked until the caller has asked for them to be read
/// whole again ([`readmit`]), so that a crash in between asks again.
pub(super) fn reconcile_contracts(
    config: &Config,
    stage: &Stage,
    wanted: &[TableContract],
    writable: bool,
) -> Result<Vec<String>, PipelineError> {
    let existing = stage.contracts()?;
    let mut steps = Vec::new();
    let mut differences = Vec::new();
    let mut tables = Vec::new();
    let mut readmitted = Vec::new();
    let compare = |have: &TableContract, want: &TableContract, out: &mut Vec<String>| {
        let mut d = Vec::new();
        if have.target != want.target {
            d.push(format!("target {} → {}", have.target, want.target));
        }
        if have.key != want.key {
            d.push(format!(
                "key ({}) → ({})",
                have.key.join(", "),
                want.key.join(", ")
            ));
        }
        if have.partition_by != want.partition_by {
            d.push(format!(
                "partition_by {} → {}",
                have.partition_by, want.partition_by
            ));
        }
        if have.grain != want.grain {
            d.push(format!("grain {} → {}", have.grain, want.grain));
        }
        if !d.is_empty() {
            out.push(format!("{}: {}", want.source, d.join(", ")));
        }
    };
    for want in wanted {
        let before = differences.len();
        if let Some(have) = existing.iter().find(|c| c.source == want.source) {
            if let (Some(had), Some(now)) = (have.source_oid, want.source_oid)
                && had != now
            {
                return Err(PgSourceError::Recreated {
                    table: want.source.clone(),
                    oid: now,
                    expected: had,
                }
                .into());
            }
            compare(have, want, &mut differences);
            if have.transform != want.transform {
                tracing::info!(table = %want.source, "the table's transform changed (plugin or its config): partitions written by the previous one are stale in lineage; `weir backfill --stale` rewrites them");
            }
            if have.out_of_config {
                readmitted.push(want.source.clone());
            }
            if have != want {
                steps.push(ContractStep::Put(TableContract {
                    source_oid: want.source_oid.or(have.source_oid),
                    out_of_config: have.out_of_config,
                    ..want.clone()
                }));
            }
        } else if let Some(have) = want.source_oid.and_then(|oid| {
            existing
                .iter()
                .find(|c| c.source_oid == Some(oid) && !wanted.iter().any(|w| w.source == c.source))
        }) {
            compare(have, want, &mut differences);
            if !writable {
                differences.push(format!(
                    "{} was staged as {} (renamed since): run `weir run` once, which carries its staged rows over to the new name",
                    want.source, have.source
                ));
            }
            steps.push(ContractStep::Rename {
                from: have.source.clone(),
                to: TableContract {
                    out_of_config: have.out_of_config,
                    ..want.clone()
                },
            });
            if have.out_of_config {
                readmitted.push(want.source.clone());
            }
        } else {
            steps.push(ContractStep::Put(want.clone()));
        }
        if differences.len() > before {
            tables.push(want.source.clone());
        }
    }
    if !differences.is_empty() {
        return Err(PipelineError::Contract {
            config: config.path.clone(),
            stage: stage.path().to_owned(),
            tables: tables.join(", "),
            differences: differences.join("; "),
        });
    }
    if !writable {
        return Ok(readmitted);
    }
    // Staged tables the config no longer reads (nor renames).
    let renamed: Vec<String> = steps
        .iter()
        .filter_map(|s| match s {
            ContractStep::Rename { from, .. } => Some(from.clone()),
            ContractStep::Put(_) => None,
        })
        .collect();
    for have in existing.iter().filter(|have| {
        !have.out_of_config
            && !wanted.iter().any(|w| w.source == have.source)
            && !renamed.contains(&have.source)
    }) {
        tracing::warn!(table = %have.source, "a staged table is no longer in the config: its changes are passed over from now on, and its target partitions are left as they are; put back in the config, it is read whole again");
        steps.push(ContractStep::Put(TableContract {
            out_of_config: true,
            ..have.clone()
        }));
    }
    for step in steps {
        match step {
            ContractStep::Put(contract) => stage.put_contract(&contract)?,
            ContractStep::Rename { from, to } => {
                let moved = stage.rename_table(&from, &to)?;
                tracing::warn!(from = %from, to = %to.source, entries = moved, "source table renamed: its staged rows now go by its new name");
            }
        }
    }
    Ok(readmitted)
}

/// Has the tables put back in the config read whole again: their changes while they
/// were out of it were passed over. Of a PostgreSQL source, a whole-table resync is
/// asked for each (its signal is written into the source's WAL, so the stream reads
/// it in order, this run or the next); a JSON-lines feed cannot be asked again (its
/// lines of the table were bad records meanwhile). Then their mark is cleared.
pub(super) async fn read_again_whole(
    config: &Config,
    stage: &Stage,
    tables: &[String],
) -> Result<(), PipelineError> {
    if let SourceConfig::Postgres { slot, .. } = &config.source {
        let dsn = config.source_write_dsn()?;
        for table in config
            .tables
            .iter()
            .filter(|t| tables.contains(&t.source.to_string()))
        {
            if let Some(dsn) = &dsn {
                let at = postgres::request_resync(dsn, slot, &table.source, None).await?;
                tracing::warn!(table = %table.source, signal = %postgres::format_lsn(at), "the table is back in the config: its changes while it was out were passed over, so it is read whole again (a resync), and its partitions rewritten");
            }
        }
    } else {
        for table in tables {
            tracing::warn!(table = %table, "the table is back in the config: the feed's lines of it while it was out were bad records (see the bad-record log); feed them again");
        }
    }
    readmit(stage, tables)
}

/// Clears the mark of tables put back in the config once they were asked to be read
/// whole again (see [`reconcile_contracts`]).
fn readmit(stage: &Stage, tables: &[String]) -> Result<(), PipelineError> {
    for mut contract in stage
        .contracts()?
        .into_iter()
        .filter(|c| c.out_of_config && tables.contains(&c.source))
    {
        contract.out_of_config = false;
        stage.put_contract(&contract)?;
    }
    Ok(())
}

/// Each configured table's relation OID in a PostgreSQL source (`None` for other
/// sources).
pub(super) async fn source_oids(
    config: &Config,
    tables: &[TableConfig],
) -> Result<Vec<Option<u32>>, PipelineError> {
    let SourceConfig::Postgres { .. } = &config.source else {
        return Ok(vec![None; tables.len()]);
    };
    let client = postgres::connect(&postgres_dsn(config)?).await?;
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        out.push(postgres::table_oid(&client, &table.source).await?);
    }
    Ok(out)
}

/// The source DSN of a PostgreSQL source.
pub(super) fn postgres_dsn(config: &Config) -> Result<Dsn, crate::config::ConfigError> {
    config
        .source_dsn()?
        .ok_or_else(|| crate::config::ConfigError::Invalid {
            path: config.path.clone(),
            field: "source.dsn_env".into(),
            message: "required for kind = \"postgres\"".into(),
        })
}

/// The primary's DSN of a PostgreSQL source that decodes on a standby
/// (`[source] primary_dsn_env`), `None` otherwise.
pub(super) fn primary_dsn(config: &Config) -> Result<Option<Dsn>, crate::config::ConfigError> {
    match &config.source {
        SourceConfig::Postgres {
            primary_dsn_env: Some(_),
            ..
        } => config.source_write_dsn(),
        _ => Ok(None),
    }
}

/// The configured tables with their columns: declared (JSON lines) or read from the
/// source's catalog (PostgreSQL), checked either way; and for PostgreSQL, the source's
/// WAL position just before the catalog was read (see `Assembler::with_catalog_lsn`).
pub(super) async fn resolve_tables(
    config: &Config,
    target: Option<&Client>,
) -> Result<Resolved, PipelineError> {
    let SourceConfig::Postgres { .. } = &config.source else {
        return Ok(Resolved {
            tables: config.tables.clone(),
            catalog_lsn: 0,
            source: config.source_id(),
        });
    };
    let source_dsn = postgres_dsn(config)?;
    let client = postgres::connect(&source_dsn).await?;
    let catalog_lsn = postgres::wal_position(&client).await?;
    let source = postgres::database_identity(&client).await?;
    postgres::refuse_missing_tables(&client, &config.tables).await?;
    let mut out = Vec::with_capacity(config.tables.len());
    for table in &config.tables {
        let (mut columns, unsupported) =
            postgres::source_columns_and_unsupported(&client, &table.source).await?;
        // A column of a type Weir cannot write, added at the source since the target
        // was made, is left out as a live run leaves it (the target cannot hold it);
        // otherwise (`init`, or a plugin that would see it) it is refused.
        if !unsupported.is_empty() {
            let existing = match target {
                Some(target) if table.plugin.is_none() => {
                    target::column_names(target, &table.target).await?
                }
                _ => None,
            };
            match existing {
                Some(existing) if unsupported.iter().all(|(c, _)| !existing.contains(c)) => {
                    for (column, declared) in &unsupported {
                        tracing::warn!(table = %table.source, column = %column, declared = %declared, "a source column of a type Weir cannot write, which the target does not have, is left out");
                    }
                }
                _ => return Err(postgres::unsupported_columns(&table.source, &unsupported).into()),
            }
        }
        // Running against an existing target: its columns are the ones written. A source
        // column the target lacks (added since `init`) is staged, not written; a target
        // column the source lost stops the table. With a plugin the target holds the
        // plugin's declared output instead, and the plugin sees every source column.
        if let Some(target) = target
            && table.plugin.is_none()
            && let Some(existing) = target::column_names(target, &table.target).await?
        {
            if let Some(lost) = existing
                .iter()
                .find(|c| !columns.iter().any(|s| &s.name == *c))
            {
                return Err(PgSourceError::SchemaChanged {
                    table: table.source.to_string(),
                    change: format!(
                        "column `{lost}` was dropped or renamed (the target still has it)"
                    ),
                }
                .into());
            }
            let added: Vec<String> = columns
                .iter()
                .filter(|c| !existing.contains(&c.name))
                .map(|c| c.name.clone())
                .collect();
            if !added.is_empty() {
                tracing::warn!(table = %table.source, columns = %added.join(", "), "source columns not in the target are staged but not written; add them to the target table to write them");
            }
            columns.retain(|c| existing.contains(&c.name));
        }
        out.push(
            table
                .with_columns(columns)
                .map_err(|(field, message)| PipelineError::Table {
                    config: config.path.clone(),
                    table: table.source.to_string(),
                    field,
                    message,
                })?,
        );
    }
    Ok(Resolved {
        tables: out,
        catalog_lsn,
        source,
    })
}

/// The configured tables as the source has them ([`resolve_tables`]).
pub(super) struct Resolved {
    pub tables: Vec<TableConfig>,
    /// The source's WAL position read before its catalog (0: not PostgreSQL).
    pub catalog_lsn: u64,
    /// The source's identity: a PostgreSQL database's
    /// ([`postgres::database_identity`]), or the JSON-lines feed's
    /// ([`Config::source_id`]).
    pub source: String,
}

/// Warns of a plugin whose output partition column is another column of the source
/// than `partition_by`: unless the plugin fills it from `partition_by`, its rows fall in
/// other partitions than the ones whose rows it was given, and each such write fails.
pub(super) fn check_partition_column(table: &TableConfig, view: &TableConfig) {
    if view.partition_by != table.partition_by && table.column(&view.partition_by).is_some() {
        tracing::warn!(
            table = %table.source,
            plugin_column = %view.partition_by,
            partition_by = %table.partition_by,
            "the plugin partitions its output by another column of the source than `partition_by`: unless it fills that column from `partition_by`, every write fails (an output row in another partition than its input's); set `partition_by` to the plugin's column if that is what it partitions by"
        );
    }
}

/// Refuses a plugin whose output partition column the table's `grain` cannot
/// partition (a `date` by hour, text by day), as the config's own columns are refused:
/// each of its jobs would fail, or, bounded in whole days, replace a day for an hour.
fn refuse_output_grain(
    config: &Config,
    table: &TableConfig,
    view: &TableConfig,
) -> Result<(), PipelineError> {
    let Some(column) = view.column(&view.partition_by) else {
        return Ok(());
    };
    let fits = match table.grain {
        crate::partition::Grain::Value => column.ty.is_value_partitionable(),
        crate::partition::Grain::Hour => {
            column.ty.is_temporal() && column.ty != crate::value::ColumnType::Date
        }
        crate::partition::Grain::Day | crate::partition::Grain::Month => column.ty.is_temporal(),
    };
    if fits {
        return Ok(());
    }
    Err(PipelineError::Table {
        config: config.path.clone(),
        table: table.source.to_string(),
        field: "grain",
        message: format!(
            "the plugin partitions its output by `{}`, a {} column, which grain \"{}\" cannot partition: change the grain, or the plugin's partition column",
            column.name, column.declared, table.grain
        ),
    })
}

/// Refuses a target that is one of the configured source tables itself (the same
/// database: each write would be streamed back as new changes, for ever), or a
/// partition (native child) of another configured target (whose partition writes
/// would delete its rows).
pub(super) async fn refuse_overlapping_targets(
    config: &Config,
    client: &Client,
    tables: &[TableConfig],
    source: &str,
) -> Result<(), PipelineError> {
    let target_db: String = client
        .query_one(
            "SELECT 'postgres:' || system_identifier || '/' || current_database() FROM pg_control_system()",
            &[],
        )
        .await
        .map_err(|source| target::TargetError::Query {
            what: "read the target's system identifier".into(),
            source: PgError(source),
        })?
        .get(0);
    let refuse = |table: &TableConfig, message: String| PipelineError::Table {
        config: config.path.clone(),
        table: table.source.to_string(),
        field: "target",
        message,
    };
    for table in tables {
        if target_db == source
            && let Some(same) = tables.iter().find(|t| t.source == table.target)
        {
            return Err(refuse(
                table,
                format!(
                    "{} is the source table {} itself (the source and target are one database): every write would come back from the source as new changes; write another table",
                    table.target, same.source
                ),
            ));
        }
        let parent = client
            .query_opt(
                "SELECT n.nspname::text, p.relname::text FROM pg_inherits i \
                 JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace \
                 WHERE i.inhrelid = to_regclass($1)",
                &[&table.target.quoted()],
            )
            .await
            .map_err(|source| target::TargetError::Query {
                what: format!("look up the parent of {}", table.target),
                source: PgError(source),
            })?;
        if let Some(parent) = parent
            && let Some(other) = tables.iter().find(|t| {
                t.target.schema == parent.get::<_, String>(0)
                    && t.target.name == parent.get::<_, String>(1)
            })
        {
            return Err(refuse(
                table,
                format!(
                    "{} is a partition of {}, the target of {}: that table's partition writes would delete its rows; write another table",
                    table.target, other.target, other.source
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a table whose target holds partitions another pipeline wrote: lineage from
/// another stage and either another source table or another source (a stage made anew
/// for the same source, or a source table renamed in the config, is this pipeline's;
/// a table of the same name in another database, a shard, is not). Two pipelines
/// writing one target table would replace each other's partitions.
pub(super) async fn refuse_foreign_lineage(
    client: &tokio_postgres::Client,
    table: &TableConfig,
    stage_id: &str,
    source: &str,
) -> Result<(), PipelineError> {
    let row = client
        .query_opt(
            "SELECT p.source_table, s.source, count(*) \
             FROM weir.partitions p LEFT JOIN weir.stages s ON s.stage_id = p.stage_id \
             WHERE p.target_table = $1 AND coalesce(p.stage_id, '') NOT IN ('', $3) \
               AND (p.source_table <> $2 OR s.source <> $4) \
             GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 1",
            &[
                &table.target.to_string(),
                &table.source.to_string(),
                &stage_id,
                &source,
            ],
        )
        .await
        .map_err(|source| target::TargetError::Query {
            what: format!("read the lineage of {}", table.target),
            source: PgError(source),
        })?;
    match row {
        None => Ok(()),
        Some(row) => {
            let (source_table, other, partitions): (String, Option<String>, i64) =
                (row.get(0), row.get(1), row.get(2));
            let literal = |s: &str| crate::config::quote_literal(s).unwrap_or_default();
            let mut remove = format!(
                "DELETE FROM weir.partitions WHERE target_table = {} AND source_table = {}",
                literal(&table.target.to_string()),
                literal(&source_table)
            );
            if let Some(other) = &other {
                remove.push_str(&format!(
                    " AND stage_id IN (SELECT stage_id FROM weir.stages WHERE source = {})",
                    literal(other)
                ));
            }
            // Its rows stay with its lineage gone: emptied, the table gets every
            // partition this stage holds at the next run.
            remove.push_str(&format!(
                "; then remove its rows: TRUNCATE {} (the next run writes every partition this stage holds; a partition of only its rows would otherwise stay, with no lineage)",
                table.target.quoted()
            ));
            Err(PipelineError::ForeignLineage {
                target: table.target.to_string(),
                from: match &other {
                    Some(other) => format!("{source_table} of {other}"),
                    None => source_table,
                },
                partitions,
                remove,
            })
        }
    }
}

/// Refuses a table whose target holds partitions another stage of this source wrote
/// under another partitioning (another partition column, `partition_column` when
/// known, as lineage records it; or a name that is no partition of this table's grain
/// nor maps onto its partitions): a new stage empties the partitions the old one wrote
/// that it holds no rows of, but such a partition says nothing of which rows were in
/// it. Lineage of this stage, or of
/// another source (refused as another pipeline's), is passed over.
pub(super) async fn refuse_other_partitioning(
    client: &tokio_postgres::Client,
    table: &TableConfig,
    partition_column: Option<&str>,
    stage_id: &str,
    source: &str,
) -> Result<(), PipelineError> {
    let rows = client
        .query(
            "SELECT p.partition, p.partition_by FROM weir.partitions p LEFT JOIN weir.stages s ON s.stage_id = p.stage_id \
             WHERE p.target_table = $1 AND coalesce(p.stage_id, '') NOT IN ('', $2) \
               AND coalesce(s.source, $3) = $3 AND p.row_count > 0 ORDER BY 1",
            &[&table.target.to_string(), &stage_id, &source],
        )
        .await
        .map_err(|source| target::TargetError::Query {
            what: format!("read the lineage of {}", table.target),
            source: PgError(source),
        })?;
    let ty = table.partition_column().ty;
    let unmapped: Vec<String> = rows
        .iter()
        .filter(|r| {
            let (name, column): (&str, Option<&str>) = (r.get(0), r.get(1));
            let partition = crate::partition::Partition::from_name(name);
            column
                .zip(partition_column)
                .is_some_and(|(was, is)| was != is)
                || (crate::partition::predicate(ty, table.grain, &partition).is_none()
                    && crate::partition::regrained(ty, table.grain, name, 1_000).is_none())
        })
        .map(|r| r.get::<_, String>(0))
        .collect();
    if unmapped.is_empty() {
        return Ok(());
    }
    let literal = crate::config::quote_literal(&table.target.to_string()).unwrap_or_default();
    let mut names: Vec<&str> = unmapped.iter().take(5).map(String::as_str).collect();
    if unmapped.len() > names.len() {
        names.push("…");
    }
    Err(PipelineError::OtherPartitioning {
        target: table.target.to_string(),
        names: names.join(", "),
        partitioning: format!("`{}` by {}", table.partition_by, table.grain),
        remove: format!(
            "TRUNCATE {}; DELETE FROM weir.partitions WHERE target_table = {literal};",
            table.target.quoted()
        ),
    })
}

/// Refuses a table whose target holds partitions this same stage wrote from another
/// of its tables (one taken out of the config, whose rows are still there: a feed's
/// table renamed in the config, which JSON lines cannot tell from a new table). The
/// new table's writes would replace some of its partitions and leave the rest: half
/// one table, half the other. A PostgreSQL table renamed at the source is carried
/// over by the contract step before this runs, so its old name is no longer the
/// stage's.
pub(super) async fn refuse_own_other_table(
    client: &tokio_postgres::Client,
    table: &TableConfig,
    stage_id: &str,
    contracts: &[crate::stage::TableContract],
) -> Result<(), PipelineError> {
    let rows = client
        .query(
            "SELECT source_table, count(*) FROM weir.partitions \
             WHERE target_table = $1 AND stage_id = $2 AND source_table <> $3 GROUP BY 1",
            &[
                &table.target.to_string(),
                &stage_id,
                &table.source.to_string(),
            ],
        )
        .await
        .map_err(|source| target::TargetError::Query {
            what: format!("read the lineage of {}", table.target),
            source: PgError(source),
        })?;
    let Some(row) = rows
        .iter()
        .find(|r| contracts.iter().any(|c| c.source == r.get::<_, String>(0)))
    else {
        return Ok(());
    };
    let source_table: String = row.get(0);
    let literal = |s: &str| crate::config::quote_literal(s).unwrap_or_default();
    Err(PipelineError::ForeignLineage {
        target: table.target.to_string(),
        from: format!("{source_table}, a table of this stage no longer in the config,"),
        partitions: row.get(1),
        remove: format!(
            "TRUNCATE {}; DELETE FROM weir.partitions WHERE target_table = {} AND source_table = {} (the next run writes {} whole)",
            table.target.quoted(),
            literal(&table.target.to_string()),
            literal(&source_table),
            table.source
        ),
    })
}

/// Refuses to make a slot for a stage that streamed from one before: the slot went
/// (dropped by hand), and with it the changes made since; a new one would start at the
/// server's current position, which `weir run` then refuses, while it held WAL.
async fn refuse_lost_slot(
    config: &Config,
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<(), PipelineError> {
    if !crate::stage::stage_exists(&config.stage_path)? {
        return Ok(());
    }
    let path = config.stage_path.clone();
    let (position, staged) = blocking(move || {
        let stage = Stage::open_read_only(&path)?;
        Ok::<_, crate::stage::StageError>((stage.checkpoint()?, stage.source_id()?))
    })
    .await?;
    // A slot renamed in the config (or a stage path naming another pipeline's stage):
    // the slot's absence says nothing of lost changes.
    if let Some(staged) = staged
        && staged != config.source_id()
    {
        return Err(crate::stage::StageError::SourceMismatch {
            path: config.stage_path.clone(),
            staged,
            configured: config.source_id(),
        }
        .into());
    }
    if position.is_none_or(|p| p.position == 0) {
        return Ok(());
    }
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|source| postgres::PgSourceError::Query {
            what: "look up the replication slot",
            source: PgError(source),
        })?
        .is_some();
    if exists {
        return Ok(());
    }
    Err(postgres::PgSourceError::SlotMissing {
        slot: slot.to_owned(),
    }
    .into())
}
