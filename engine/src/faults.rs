//! Fault injection for the crash suite: failpoints at each step of the write path, where
//! a crash or an error must leave nothing lost and nothing duplicated.
//!
//! Compiled in only with the cargo feature `failpoints` (`scripts/test` turns it on for
//! the test build; a release build has none): then `FAILPOINTS="name=action;…"` in the
//! environment at start arms them, with the `fail` crate's actions (`panic`, `return`
//! for an error, `return(abort)` for a process abort, `N*action` to fire N times).
//! Without the feature, [`failpoint!`](crate::failpoint) expands to nothing.
//!
//! The failpoints, in the order a change meets them (tests/README.md lists the test of
//! each):

/// Every failpoint, for the suite that arms each in turn.
pub const FAILPOINTS: [&str; 9] = [
    // The batch is synced in the stage; the source is not acknowledged yet.
    "stage-before-ack",
    // The source is acknowledged.
    "stage-after-ack",
    // Inside the partition's target transaction, after its DELETE (or TRUNCATE).
    "target-after-delete",
    // Inside the transaction, after the COPY of the new rows.
    "target-after-copy",
    // The transaction committed; the dirty mark is not cleared yet.
    "target-after-commit",
    // Inside a plugin job, before each call into the guest.
    "plugin-call",
    // A PostgreSQL snapshot chunk was read; it is not staged yet.
    "snapshot-chunk",
    // A range of the first load was read; it is not staged yet.
    "load-range",
    // A part of the first load is being ingested: its keys are in the stage, its rows
    // and its batch not yet.
    "load-ingest",
];

/// The error a failpoint armed with `return` makes its step fail with.
#[derive(Debug, thiserror::Error)]
#[error("injected fault at failpoint `{0}` (FAILPOINTS)")]
pub struct InjectedFault(pub &'static str);

/// A failpoint named `$name` (one of [`FAILPOINTS`]) in a function returning
/// `Result<_, E>` with `E: From<InjectedFault>`.
#[macro_export]
macro_rules! failpoint {
    ($name:literal) => {
        // The error is the caller's own (some are large), made only when armed.
        #[allow(clippy::result_large_err)]
        {
            fail::fail_point!($name, |arg: Option<String>| {
                if arg.as_deref() == Some("abort") {
                    std::process::abort();
                }
                Err($crate::faults::InjectedFault($name).into())
            })
        }
    };
}

/// The deliberately broken build the suite must catch: with `ack-before-stage` armed
/// (`FAILPOINTS=ack-before-stage=return`), `run` acknowledges each batch to the source
/// before staging it. Always `false` without the `failpoints` feature.
pub fn ack_before_stage() -> bool {
    #[cfg(feature = "failpoints")]
    {
        fail::eval("ack-before-stage", |_| ()).is_some()
    }
    #[cfg(not(feature = "failpoints"))]
    {
        false
    }
}

/// Arms the failpoints named in `FAILPOINTS`, for the life of the returned guard.
#[cfg(feature = "failpoints")]
pub fn setup() -> fail::FailScenario<'static> {
    fail::FailScenario::setup()
}
