//! `hostile-snoop`: a row plugin that tries to read the outside world (a file, a
//! directory, the environment, the arguments, two clocks twice, random bytes) and
//! outputs what it got (see `../README.md`). Under Weir's virtual WASI every probe
//! gets an error or a deterministic value, so two runs at different times give
//! identical output.

use std::time::{SystemTime, UNIX_EPOCH};

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
    Value,
};

/// Probes the environment once per row.
#[derive(Debug)]
pub struct Snoop;

/// A file outside any preopened directory.
const FILE: &str = "/etc/passwd";
/// Bytes of randomness requested from each source.
#[cfg(target_arch = "wasm32")]
const RANDOM_BYTES: u64 = 16;

fn file() -> String {
    match std::fs::read_to_string(FILE) {
        Ok(text) => format!("ok: {text}"),
        Err(e) => format!("error: {e}"),
    }
}

fn directory() -> String {
    match std::fs::read_dir("/") {
        Ok(entries) => entries
            .map(|e| match e {
                Ok(e) => e.file_name().to_string_lossy().into_owned(),
                Err(e) => format!("error: {e}"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("error: {e}"),
    }
}

fn environment() -> String {
    std::env::vars()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn arguments() -> String {
    std::env::args().collect::<Vec<_>>().join("\n")
}

/// The wall clock in microseconds since the epoch (negative before it).
fn wall_clock() -> Value {
    let now = SystemTime::now();
    match now.duration_since(UNIX_EPOCH) {
        Ok(d) => Value::Timestamp(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
        Err(e) => Value::Timestamp(-i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX)),
    }
}

/// The monotonic clock in nanoseconds (`null` where there is no WASI).
fn monotonic() -> Value {
    #[cfg(target_arch = "wasm32")]
    return Value::Integer(wasip2::clocks::monotonic_clock::now() as i64);
    #[cfg(not(target_arch = "wasm32"))]
    Value::Null
}

/// Random bytes from `wasi:random/random` (`null` where there is no WASI).
fn random() -> Value {
    #[cfg(target_arch = "wasm32")]
    return Value::Bytes(wasip2::random::random::get_random_bytes(RANDOM_BYTES));
    #[cfg(not(target_arch = "wasm32"))]
    Value::Null
}

/// Random bytes from `wasi:random/insecure` (`null` where there is no WASI).
fn insecure_random() -> Value {
    #[cfg(target_arch = "wasm32")]
    return Value::Bytes(wasip2::random::insecure::get_insecure_random_bytes(
        RANDOM_BYTES,
    ));
    #[cfg(not(target_arch = "wasm32"))]
    Value::Null
}

impl RowPlugin for Snoop {
    fn describe() -> Description {
        Description::new("hostile-snoop", env!("CARGO_PKG_VERSION"), Kind::Row)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .column("file", ColumnType::Text)
            .column("directory", ColumnType::Text)
            .column("environment", ColumnType::Text)
            .column("arguments", ColumnType::Text)
            .column("wall_clock_1", ColumnType::Timestamptz)
            .column("wall_clock_2", ColumnType::Timestamptz)
            .column("monotonic_1", ColumnType::Bigint)
            .column("monotonic_2", ColumnType::Bigint)
            .column("random", ColumnType::Bytea)
            .column("insecure_random", ColumnType::Bytea)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(Snoop)
    }

    fn transform(&self, row: &Input) -> Result<Option<Row>, Reject> {
        let wall_clock_1 = wall_clock();
        let monotonic_1 = monotonic();
        // The readings are 30 s apart for a real clock. In the host's sandbox time does
        // not pass: the sleep returns at once (it must not hold the host's thread).
        std::thread::sleep(std::time::Duration::from_secs(30));
        let wall_clock_2 = wall_clock();
        let monotonic_2 = monotonic();
        weir_plugin::log::info("hostile-snoop probed the environment");
        Ok(Some(
            Row::new()
                .set("id", row.int("id")?)
                .set(
                    "order_date",
                    row.date_or_null("order_date")?.map(Value::Date),
                )
                .set("file", file())
                .set("directory", directory())
                .set("environment", environment())
                .set("arguments", arguments())
                .set("wall_clock_1", wall_clock_1)
                .set("wall_clock_2", wall_clock_2)
                .set("monotonic_1", monotonic_1)
                .set("monotonic_2", monotonic_2)
                .set("random", random())
                .set("insecure_random", insecure_random()),
        ))
    }
}

weir_plugin::export_row_plugin!(Snoop);
