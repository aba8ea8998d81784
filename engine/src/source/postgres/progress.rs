//! How far the initial snapshot, a first load and a resync got: the source state staged
//! with each of their chunks, and what `weir status` shows of it.

use super::error::PgSourceError;

/// How far the snapshot got; staged with each chunk (`StageChange::SourceState`).
/// The first load ([`super::load`]) stages it too, with the tables it loaded done, and
/// a `weir resync` signal with its table taken out of `done`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct SnapshotProgress {
    /// Tables whose snapshot is complete.
    pub(super) done: Vec<String>,
    /// The table being read and the text of the last key read in it.
    pub(super) current: Option<(String, Vec<Option<String>>)>,
    /// Every table is done.
    pub(super) complete: bool,
    /// Tables being read again for `weir resync`, until done.
    pub(super) resync: Vec<Resync>,
    /// Tables the first load had begun and not finished: the page ranges it had not
    /// staged whole, the only ones the watermark snapshot reads of them.
    pub(super) pages: Vec<PagesLeft>,
}

/// A table part way through its first load: the ranges of pages not staged whole yet.
///
/// The rows of the other ranges are staged at the load's snapshot, and the stream
/// carries every change since, so what is left to read is the rows in these pages
/// now, between watermarks. That holds while a row that no change touched keeps its
/// place (its `ctid`): true unless the table's files are rewritten (`VACUUM FULL`,
/// `CLUSTER`, `TRUNCATE`, a partition attached or detached), which `files` detects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct PagesLeft {
    /// `schema.name`.
    pub(super) table: String,
    /// The files the pages are of: each leaf relation's `oid:relfilenode` (see
    /// [`super::load::relation_files`]).
    pub(super) files: String,
    /// Ranges of pages, `from` inclusive, `to` exclusive (`None`: to the end of the
    /// table), in order.
    pub(super) ranges: Vec<(u64, Option<u64>)>,
    /// Some of its pages are staged (`weir status` says `reading`, else `waiting`).
    pub(super) begun: bool,
}

/// The progress as staged before `pages` was added: a stage written by an older build
/// decodes as one.
#[derive(serde::Deserialize)]
struct ProgressBeforePages {
    done: Vec<String>,
    current: Option<(String, Vec<Option<String>>)>,
    complete: bool,
    resync: Vec<Resync>,
}

/// The progress as staged before `resync` was added.
#[derive(serde::Deserialize)]
struct ProgressBeforeResync {
    done: Vec<String>,
    current: Option<(String, Vec<Option<String>>)>,
    complete: bool,
}

/// A table read again because `weir resync` asked for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Resync {
    /// `schema.name`.
    pub(super) table: String,
    /// `--where`: only the rows it selects are read again (upserted). `None`: the whole
    /// table, whose staged rows were dropped when the resync began; its partitions are
    /// not written until it is read whole (see [`resync_holds`]).
    pub(super) filter: Option<String>,
}

impl SnapshotProgress {
    /// The progress staged as `bytes`, in this build's form or the older one.
    pub(super) fn decode(bytes: &[u8]) -> Option<SnapshotProgress> {
        // Each older form is a prefix of the newer: the newest that decodes is right.
        postcard::from_bytes::<SnapshotProgress>(bytes)
            .ok()
            .or_else(|| {
                postcard::from_bytes::<ProgressBeforePages>(bytes)
                    .ok()
                    .or_else(|| {
                        postcard::from_bytes::<ProgressBeforeResync>(bytes)
                            .ok()
                            .map(|old| ProgressBeforePages {
                                done: old.done,
                                current: old.current,
                                complete: old.complete,
                                resync: Vec::new(),
                            })
                    })
                    .map(|old| SnapshotProgress {
                        done: old.done,
                        current: old.current,
                        complete: old.complete,
                        resync: old.resync,
                        pages: Vec::new(),
                    })
            })
    }

    /// The pages of `table` left to read, if its first load began and did not finish.
    pub(super) fn pages_of(&self, table: &str) -> Option<&PagesLeft> {
        self.pages.iter().find(|p| p.table == table)
    }

    /// Notes that every row of the range of pages of `table` starting at `from` is
    /// staged (from its first page to its last, or to `to` if it ends before its
    /// last). The table's entry goes when no range is left; `true` then.
    pub(super) fn pages_staged(&mut self, table: &str, from: u64, to: Option<u64>) -> bool {
        let Some(i) = self.pages.iter().position(|p| p.table == table) else {
            return false;
        };
        self.pages[i].begun = true;
        let ranges = &mut self.pages[i].ranges;
        if let Some(r) = ranges.iter().position(|&(f, _)| f == from) {
            match (to, ranges[r].1) {
                (Some(to), Some(end)) if to < end => ranges[r].0 = to,
                (Some(to), None) => ranges[r].0 = to,
                _ => {
                    ranges.remove(r);
                }
            }
        }
        if ranges.is_empty() {
            self.pages.remove(i);
            return true;
        }
        false
    }

    pub(super) fn encode(&self, table: &str) -> Result<Vec<u8>, PgSourceError> {
        postcard::to_allocvec(self).map_err(|_| PgSourceError::BadChange {
            table: table.to_owned(),
            reason: "cannot encode the snapshot progress".into(),
        })
    }

    /// The progress once a resync of `table` (with `filter`) begins: the table is read
    /// again from its first key. A resync with a filter of a table whose resync with
    /// another filter is under way reads again, from its first key, the rows either
    /// selects. `None`: a resync with a filter of a table not read whole yet (its
    /// snapshot, or a whole resync, is under way and reads every row anyway).
    pub(super) fn with_resync(&self, table: &str, filter: Option<String>) -> Option<Self> {
        let whole = filter.is_none();
        let mut filter = filter;
        if !whole && !self.complete && !self.done.iter().any(|t| t == table) {
            let under_way = self
                .resync
                .iter()
                .find(|r| r.table == table)
                .and_then(|r| r.filter.as_ref())?;
            filter = filter.map(|f| format!("({under_way}) OR ({f})"));
        }
        let mut next = self.clone();
        next.done.retain(|t| t != table);
        next.complete = false;
        if next.current.as_ref().is_some_and(|(t, _)| t == table) {
            next.current = None;
        }
        next.resync.retain(|r| r.table != table);
        // Read again where `--where` says, in key order; or whole, by its pages (their
        // files are taken at the first chunk).
        next.pages.retain(|p| p.table != table);
        if whole {
            next.pages.push(PagesLeft {
                table: table.to_owned(),
                files: String::new(),
                ranges: vec![(0, None)],
                begun: false,
            });
        }
        next.resync.push(Resync {
            table: table.to_owned(),
            filter,
        });
        Some(next)
    }
}

/// The tables a whole-table resync is reading again: their staged rows were dropped
/// when it began, so their partitions are not written until it is done (the target
/// keeps its rows meanwhile). From the progress the stage holds.
pub fn resync_holds(state: Option<&[u8]>) -> Vec<String> {
    state
        .and_then(SnapshotProgress::decode)
        .map(|p| {
            p.resync
                .into_iter()
                .filter(|r| r.filter.is_none())
                .map(|r| r.table)
                .collect()
        })
        .unwrap_or_default()
}

/// How far the initial snapshot got with one table, as `weir status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotTable {
    /// `schema.name`.
    pub table: String,
    /// `done` (every row staged), `reading` (part way through it: the watermark
    /// snapshot, or a first load that stopped with some of its pages staged), `resyncing` (read again for `weir resync`), or `waiting` (not read yet, or
    /// read again after a first load that did not finish it).
    pub state: &'static str,
    /// The `--where` of a resync under way, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// Each table's snapshot state from the progress the stage holds (`None`: nothing
/// staged yet, so every table waits).
pub fn snapshot_tables(state: Option<&[u8]>, tables: &[String]) -> Vec<SnapshotTable> {
    let progress = state.and_then(SnapshotProgress::decode).unwrap_or_default();
    tables
        .iter()
        .map(|table| {
            let resync = progress.resync.iter().find(|r| &r.table == table);
            SnapshotTable {
                table: table.clone(),
                // `complete` alone does not say a table is loaded: one added to the
                // config since is not, until the next run has read it.
                state: if progress.done.contains(table) {
                    "done"
                } else if resync.is_some() {
                    "resyncing"
                } else if progress.current.as_ref().is_some_and(|(t, _)| t == table)
                    || progress.pages_of(table).is_some_and(|p| p.begun)
                {
                    "reading"
                } else {
                    "waiting"
                },
                filter: resync.and_then(|r| r.filter.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn left(ranges: Vec<(u64, Option<u64>)>) -> SnapshotProgress {
        SnapshotProgress {
            pages: vec![PagesLeft {
                table: "public.orders".into(),
                files: "16384:16384".into(),
                ranges,
                begun: false,
            }],
            ..SnapshotProgress::default()
        }
    }

    /// A table added to the config after the first load completed is not loaded until
    /// a run has read it: `status` says `waiting`, not done.
    #[test]
    fn a_table_added_after_the_load_completed_is_waiting() {
        let p = SnapshotProgress {
            done: vec!["public.orders".into()],
            complete: true,
            ..SnapshotProgress::default()
        };
        let states: Vec<&str> = snapshot_tables(
            Some(&p.encode("public.orders").expect("encode")),
            &["public.orders".into(), "public.shop_orders".into()],
        )
        .into_iter()
        .map(|t| t.state)
        .collect();
        assert_eq!(states, ["done", "waiting"]);
    }

    /// What the load and the snapshot stage of a table's pages: a range staged whole
    /// goes, one staged up to a page is left from that page, the entry goes with its
    /// last range (and only then is the table done).
    #[test]
    fn pages_staged_leave_exactly_the_pages_not_read() {
        let mut p = left(vec![(0, Some(10)), (10, Some(20)), (20, None)]);
        let ranges = |p: &SnapshotProgress| p.pages_of("public.orders").map(|l| l.ranges.clone());
        let statuses = |p: &SnapshotProgress| {
            snapshot_tables(
                Some(&p.encode("t").expect("encode")),
                &["public.orders".into()],
            )[0]
            .state
        };
        assert_eq!(statuses(&p), "waiting", "nothing staged yet");
        assert!(!p.pages_staged("public.orders", 10, Some(20)));
        assert_eq!(ranges(&p), Some(vec![(0, Some(10)), (20, None)]));
        assert_eq!(statuses(&p), "reading");
        assert!(!p.pages_staged("public.orders", 0, Some(4)));
        assert_eq!(ranges(&p), Some(vec![(4, Some(10)), (20, None)]));
        assert!(
            !p.pages_staged("public.orders", 4, Some(12)),
            "a chunk never passes its range's end"
        );
        assert_eq!(ranges(&p), Some(vec![(20, None)]));
        assert!(!p.pages_staged("public.orders", 20, Some(25)));
        assert_eq!(ranges(&p), Some(vec![(25, None)]));
        assert!(
            !p.pages_staged("public.ledger", 25, None),
            "another table's pages"
        );
        assert!(
            !p.pages_staged("public.orders", 99, None),
            "a range not left"
        );
        assert_eq!(ranges(&p), Some(vec![(25, None)]));
        assert!(p.pages_staged("public.orders", 25, None));
        assert_eq!(ranges(&p), None);
        assert!(
            !p.pages_staged("public.orders", 25, None),
            "no entry left: not done twice"
        );
    }

    /// A progress staged by the builds before pages (and before resync) still decodes,
    /// with no pages; a whole resync reads every page, one with `--where` in key order.
    #[test]
    fn older_progress_decodes_and_a_resync_reads_in_key_order() {
        #[derive(serde::Serialize)]
        struct BeforePages {
            done: Vec<String>,
            current: Option<(String, Vec<Option<String>>)>,
            complete: bool,
            resync: Vec<Resync>,
        }
        let old = BeforePages {
            done: vec!["public.a".into()],
            current: Some(("public.b".into(), vec![Some("7".into())])),
            complete: false,
            resync: vec![Resync {
                table: "public.c".into(),
                filter: Some("id > 3".into()),
            }],
        };
        let decoded = SnapshotProgress::decode(&postcard::to_allocvec(&old).expect("encode"))
            .expect("decode");
        assert_eq!(decoded.done, old.done);
        assert_eq!(decoded.current, old.current);
        assert_eq!(decoded.resync, old.resync);
        assert!(decoded.pages.is_empty());
        let p = left(vec![(3, None)]);
        let back = SnapshotProgress::decode(&p.encode("t").expect("encode")).expect("decode");
        assert_eq!(back.pages, p.pages);
        let resync = p
            .with_resync("public.orders", None)
            .expect("a whole resync");
        assert_eq!(
            resync.pages_of("public.orders").map(|l| l.ranges.clone()),
            Some(vec![(0, None)]),
            "a whole resync reads every page"
        );
        let mut done = p.clone();
        done.pages.clear();
        done.done.push("public.orders".into());
        let filtered = done
            .with_resync("public.orders", Some("id > 3".into()))
            .expect("a resync with --where");
        assert!(filtered.pages.is_empty(), "--where reads in key order");
        // A second --where while the first is read: the rows either selects, from the
        // first key again.
        let mut reading = filtered.clone();
        reading.current = Some(("public.orders".into(), vec![Some("9".into())]));
        let both = reading
            .with_resync("public.orders", Some("id = 1".into()))
            .expect("a second resync with --where");
        assert_eq!(
            both.resync,
            vec![Resync {
                table: "public.orders".into(),
                filter: Some("(id > 3) OR (id = 1)".into()),
            }]
        );
        assert_eq!(both.current, None, "read again from the first key");
        // Under a whole resync, a --where is passed over: every row is read anyway.
        assert!(
            resync
                .with_resync("public.orders", Some("id = 1".into()))
                .is_none()
        );
    }
}
