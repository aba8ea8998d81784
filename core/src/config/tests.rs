use super::*;
use crate::value::{ColumnType, EpochUnit};

const GOOD: &str = r#"
[source]
kind = "jsonl"
path = "feed.jsonl"

[stage]
path = "./weir-data"

[target]
kind = "postgres"
dsn_env = "WEIR_TEST_TARGET_DSN"

[[table]]
source = "public.orders"
target = "analytics.fact_orders"
key = ["id"]
partition_by = "order_date"
grain = "day"
columns = { id = "bigint", order_date = "date", amount = "numeric(12,2)" }
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/weir/weir.toml"))
}

fn error_of(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("config should be refused:\n{text}"),
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            msg
        }
    }
}

#[test]
fn a_feed_file_has_one_id_however_its_config_is_spelled() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("sub")).expect("sub");
    std::fs::write(dir.path().join("feed.jsonl"), "").expect("feed");
    let ids: Vec<String> = ["weir.toml", "sub/../weir.toml", "./sub/../weir.toml"]
        .iter()
        .map(|name| {
            Config::parse(GOOD, &dir.path().join(name))
                .expect("valid")
                .source_id()
        })
        .collect();
    let canonical = std::fs::canonicalize(dir.path().join("feed.jsonl")).expect("canonical");
    assert_eq!(ids[0], format!("jsonl:{}", canonical.display()));
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    // A feed not created yet: its canonical folder and its name.
    let later = GOOD.replace("feed.jsonl", "sub/../later.jsonl");
    let id = Config::parse(&later, &dir.path().join("weir.toml"))
        .expect("valid")
        .source_id();
    let folder = std::fs::canonicalize(dir.path()).expect("canonical");
    assert_eq!(
        id,
        format!("jsonl:{}", folder.join("later.jsonl").display())
    );
    // Older spellings of one file are one feed; other files, stdin and slots are not.
    let spelled = format!("jsonl:{}/sub/../feed.jsonl", dir.path().display());
    assert!(same_feed(&spelled, &ids[0]));
    assert!(!same_feed(&ids[0], &id));
    assert!(!same_feed("jsonl:stdin", &ids[0]));
    assert!(same_feed("jsonl:stdin", "jsonl:stdin"));
    assert!(!same_feed("postgres:slot=a", "postgres:slot=b"));
}

#[test]
fn a_good_config_validates_and_resolves_paths() {
    let config = parse(GOOD).expect("valid");
    assert_eq!(config.stage_path, Path::new("/etc/weir/./weir-data"));
    assert_eq!(
        config.source,
        SourceConfig::Jsonl {
            path: Some("/etc/weir/feed.jsonl".into()),
            on_bad_record: OnBadRecord::Fail
        }
    );
    let t = &config.tables[0];
    assert_eq!(t.target.quoted(), "\"analytics\".\"fact_orders\"");
    assert_eq!(
        t.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["id", "order_date", "amount"]
    );
}

#[test]
fn a_column_may_declare_its_epoch_unit() {
    let with = |spec: &str| GOOD.replace("order_date = \"date\"", &format!("order_date = {spec}"));
    let config = parse(&with("{ type = \"date\", epoch = \"days\" }")).expect("valid");
    let column = config.tables[0].column("order_date").expect("column");
    assert_eq!(
        (column.ty, column.epoch),
        (ColumnType::Date, Some(EpochUnit::Days))
    );
    let config = parse(&with("{ type = \"date\" }")).expect("valid");
    assert_eq!(
        config.tables[0].column("order_date").expect("column").epoch,
        None
    );
    let err = error_of(&with("{ type = \"date\", epoch = \"fortnights\" }"));
    assert!(
        err.contains("table[0].columns.order_date.epoch: unknown epoch unit `fortnights`"),
        "{err}"
    );
    let err = error_of(&GOOD.replace(
        "\"numeric(12,2)\"",
        "{ type = \"numeric(12,2)\", epoch = \"ms\" }",
    ));
    assert!(
        err.contains(
            "table[0].columns.amount.epoch: an epoch unit is for date and timestamp columns"
        ),
        "{err}"
    );
    let err = error_of(&with("{ type = \"date\", unit = \"ms\" }"));
    assert!(err.contains("unknown field `unit`"), "{err}");
}

#[test]
fn errors_name_the_file_and_the_field() {
    let cases = [
        (GOOD.replace("grain = \"day\"", "grain = \"week\""), "grain"),
        (
            GOOD.replace("key = [\"id\"]", "key = [\"nope\"]"),
            "table[0].key: `nope` is not a declared column",
        ),
        (
            GOOD.replace("partition_by = \"order_date\"", "partition_by = \"amount\""),
            "table[0].grain",
        ),
        (
            GOOD.replace("\"numeric(12,2)\"", "\"point\""),
            "table[0].columns.amount: unknown column type `point`",
        ),
        (
            GOOD.replace(
                "dsn_env = \"WEIR_TEST_TARGET_DSN\"",
                "dsn_env = \"postgres://u:pw@h/db\"",
            ),
            "target.dsn_env: must name an environment variable",
        ),
        (
            GOOD.replace("kind = \"jsonl\"", "kind = \"kafka\""),
            "source.kind: unknown kind `kafka`",
        ),
        (
            GOOD.replace("[stage]", "[stage]\ncolour = 1"),
            "unknown field `colour`",
        ),
        (
            GOOD.replace("path = \"feed.jsonl\"", ""),
            "source.path: required",
        ),
    ];
    for (text, want) in cases {
        let msg = error_of(&text);
        assert!(msg.starts_with("/etc/weir/weir.toml"), "{msg}");
        assert!(msg.contains(want), "want `{want}` in: {msg}");
    }
}

#[test]
fn the_write_mode_defaults_to_auto_and_an_unknown_one_lists_the_choices() {
    assert_eq!(parse(GOOD).expect("good").tables[0].write, WriteMode::Auto);
    for (mode, want) in [
        ("auto", WriteMode::Auto),
        ("replace", WriteMode::Replace),
        ("merge", WriteMode::Merge),
    ] {
        let text = GOOD.replace(
            "grain = \"day\"",
            &format!("grain = \"day\"\nwrite = \"{mode}\""),
        );
        assert_eq!(parse(&text).expect(mode).tables[0].write, want);
    }
    let msg = error_of(&GOOD.replace("grain = \"day\"", "grain = \"day\"\nwrite = \"upsert\""));
    assert!(
        msg.contains("table[0].write: unknown write mode `upsert`: use \"auto\" (the default), \"replace\" or \"merge\""),
        "{msg}"
    );
}

#[test]
fn a_dsn_never_appears_in_errors_or_debug_output() {
    let secret = "hunter2-very-secret";
    let config = parse(GOOD).expect("valid");
    let bad = format!("postgres://user:{secret}@host:notaport/db");
    let err = config
        .dsn_from_env("target.dsn_env", "V", |_| Some(bad.clone()))
        .expect_err("bad port must be refused");
    assert!(
        err.to_string()
            .contains("target.dsn_env: environment variable V: connection parameter port:"),
        "{err}"
    );
    assert!(!format!("{err} {err:?}").contains(secret));
    let unreadable = format!("postgres://user:{secret}@host/db?sslmode=%ZZ");
    let err = config
        .dsn_from_env("target.dsn_env", "V", |_| Some(unreadable.clone()))
        .expect_err("bad escape");
    assert!(
        err.to_string()
            .contains("target.dsn_env: environment variable V does not hold a valid"),
        "{err}"
    );
    assert!(!format!("{err} {err:?}").contains(secret));
    // A password written into the config by mistake is not quoted back.
    for line in [
        format!("dsn = \"postgres://u:{secret}@h/db\""),
        format!("password = \"{secret}\""),
        format!("dsn_env = \"u:{secret}@h\""),
    ] {
        let text = GOOD.replace(
            "dsn_env = \"WEIR_TEST_TARGET_DSN\"",
            &format!("dsn_env = \"WEIR_TEST_TARGET_DSN\"\n{line}"),
        );
        let text = if line.starts_with("dsn_env") {
            GOOD.replace("dsn_env = \"WEIR_TEST_TARGET_DSN\"", &line)
        } else {
            text
        };
        let msg = error_of(&text);
        assert!(!msg.contains(secret), "{msg}");
        assert!(msg.contains("dsn_env"), "{msg}");
    }
    let good = format!("postgres://user:{secret}@host:5432/db");
    let dsn = config
        .dsn_from_env("target.dsn_env", "V", |_| Some(good.clone()))
        .expect("valid dsn");
    assert!(!format!("{dsn} {dsn:?} {config:?}").contains(secret));
    assert_eq!(dsn.expose(), good);
    let missing = config
        .dsn_from_env("target.dsn_env", "V", |_| None)
        .expect_err("unset");
    assert!(
        missing
            .to_string()
            .contains("environment variable V is not set")
    );
    let empty = config
        .dsn_from_env("target.dsn_env", "V", |_| Some("  ".into()))
        .expect_err("empty");
    assert!(
        empty
            .to_string()
            .contains("target.dsn_env: environment variable V is not set (or is empty)")
    );
}

#[test]
fn a_plugin_s_output_cap_is_a_bounded_setting_of_its_table() {
    let with = |extra: &str| format!("{GOOD}plugin = \"orders.wasm\"\n{extra}");
    let limits = |text: &str| {
        parse(text).expect("valid").tables[0]
            .plugin
            .clone()
            .expect("a plugin")
            .limits
    };
    assert_eq!(
        limits(&with("")).output_bytes_per_call,
        crate::limits::DEFAULT_OUTPUT_BYTES_PER_CALL
    );
    assert_eq!(
        limits(&with("plugin_output_mb = 32\n")).output_bytes_per_call,
        32 << 20
    );
    for bad in ["0", "4097"] {
        let e = error_of(&with(&format!("plugin_output_mb = {bad}\n")));
        assert!(
            e.contains("table[0].plugin_output_mb")
                && e.contains(&format!("{bad} is outside 1 to 4096")),
            "{e}"
        );
    }
    let e = error_of(&format!("{GOOD}plugin_output_mb = 32\n"));
    assert!(
        e.contains("table[0].plugin_output_mb")
            && e.contains("only applies to a table with a `plugin`"),
        "{e}"
    );
}

#[test]
fn a_plugin_s_fuel_per_row_is_a_bounded_setting_of_its_table() {
    let with = |extra: &str| format!("{GOOD}plugin = \"orders.wasm\"\n{extra}");
    let per_row = |text: &str| {
        parse(text).expect("valid").tables[0]
            .plugin
            .clone()
            .expect("a plugin")
            .limits
            .fuel_per_row
    };
    assert_eq!(per_row(&with("")), crate::limits::DEFAULT_FUEL_PER_ROW);
    assert_eq!(per_row(&with("plugin_fuel_per_row = 0\n")), 0);
    let e = error_of(&with("plugin_fuel_per_row = 1000000000001\n"));
    assert!(
        e.contains("table[0].plugin_fuel_per_row") && e.contains("is outside 0 to 1000000000000"),
        "{e}"
    );
    let e = error_of(&format!("{GOOD}plugin_fuel_per_row = 5\n"));
    assert!(e.contains("only applies to a table with a `plugin`"), "{e}");
}

#[test]
fn the_memory_budget_adds_up_and_a_limit_below_it_is_refused() {
    let plugin = GOOD.replace(
        "columns = {",
        "plugin = \"p.wasm\"\nplugin_memory_mb = 64\nplugin_output_mb = 32\ncolumns = {",
    );
    let with = |engine: &str, text: &str| format!("{text}\n[engine]\n{engine}\n");
    let budget = parse(&with("parallelism = 3", &plugin))
        .expect("valid")
        .memory_budget();
    let mib = |n: u64| n << 20;
    // A job: three 8 MiB input chunks, three 32 MiB outputs, 1.25 MiB of COPY buffer and
    // the 64 MiB instance.
    assert_eq!(budget.job, mib(24) + mib(96) + mib(5) / 4 + mib(64));
    assert_eq!(budget.jobs, 3 * budget.job);
    assert_eq!(budget.stage, mib(192));
    assert_eq!(budget.intake, mib(96));
    assert_eq!(budget.process, mib(96) + mib(64));
    assert_eq!(
        budget.total,
        budget.stage + budget.jobs + budget.intake + budget.process
    );
    // The identity's job is its input chunks thrice and the buffer.
    let identity = parse(GOOD).expect("valid").memory_budget();
    assert_eq!(identity.job, mib(48) + mib(5) / 4);
    assert_eq!(identity.process, mib(96));

    let total_mib = budget.total.div_ceil(1 << 20);
    let refused = error_of(&with(
        &format!("parallelism = 3\nmemory_limit_mb = {}", total_mib - 1),
        &plugin,
    ));
    assert!(
        refused.contains("engine.memory_limit_mb")
            && refused.contains(&format!("{total_mib} MiB = stage 192 MiB + 3 jobs"))
            && refused.contains("lower `parallelism`"),
        "{refused}"
    );
    let fits = parse(&with(
        &format!("parallelism = 3\nmemory_limit_mb = {total_mib}"),
        &plugin,
    ))
    .expect("a budget at the limit fits");
    assert_eq!(fits.engine.memory_limit_bytes, Some(mib(total_mib)));
    assert!(error_of(&with("memory_limit_mb = 10", GOOD)).contains("between 64 and"));
}

/// `GOOD` with a PostgreSQL source (its columns from the source table), and `line`
/// added to `[source]`.
fn postgres_with(line: &str) -> String {
    GOOD.replace(
        "kind = \"jsonl\"\npath = \"feed.jsonl\"",
        &format!(
            "kind = \"postgres\"\ndsn_env = \"WEIR_SOURCE_DSN\"\nslot = \"s\"\npublication = \"p\"\n{line}"
        ),
    )
    .lines()
    .filter(|l| !l.starts_with("columns"))
    .collect::<Vec<_>>()
    .join("\n")
}

#[test]
fn a_standby_source_names_the_primary_in_a_variable_of_its_own() {
    let postgres = postgres_with("");
    let with = postgres_with;
    let config = parse(&with("primary_dsn_env = \"WEIR_PRIMARY_DSN\"")).expect("valid");
    let SourceConfig::Postgres {
        primary_dsn_env, ..
    } = &config.source
    else {
        panic!("a postgres source");
    };
    assert_eq!(primary_dsn_env.as_deref(), Some("WEIR_PRIMARY_DSN"));
    let without = parse(&postgres).expect("valid");
    assert!(matches!(
        without.source,
        SourceConfig::Postgres {
            primary_dsn_env: None,
            ..
        }
    ));
    for (line, want) in [
        (
            "primary_dsn_env = \"WEIR_SOURCE_DSN\"",
            "source.primary_dsn_env: names the same variable as dsn_env",
        ),
        (
            "primary_dsn_env = \"host=db\"",
            "source.primary_dsn_env: must name an environment variable",
        ),
    ] {
        let msg = error_of(&with(line));
        assert!(msg.contains(want), "want `{want}` in: {msg}");
    }
    let msg = error_of(&GOOD.replace(
        "path = \"feed.jsonl\"",
        "path = \"feed.jsonl\"\nprimary_dsn_env = \"WEIR_PRIMARY_DSN\"",
    ));
    assert!(
        msg.contains("source.primary_dsn_env: only applies to kind = \"postgres\""),
        "{msg}"
    );
}

#[test]
fn the_snapshot_method_and_parallelism_are_checked_and_default_to_a_parallel_export() {
    let with = postgres_with;
    let config = parse(&postgres_with("")).expect("valid");
    let SourceConfig::Postgres {
        snapshot_method,
        snapshot_parallelism,
        ..
    } = config.source
    else {
        panic!("a postgres source");
    };
    assert_eq!(snapshot_method, SnapshotMethod::Export);
    assert!(snapshot_parallelism >= 1);
    let config = parse(&with(
        "snapshot_method = \"watermarks\"\nsnapshot_parallelism = 8",
    ))
    .expect("valid");
    assert!(matches!(
        config.source,
        SourceConfig::Postgres {
            snapshot_method: SnapshotMethod::Watermarks,
            snapshot_parallelism: 8,
            ..
        }
    ));
    for (line, want) in [
        (
            "snapshot_method = \"copy\"",
            "source.snapshot_method: unknown method `copy`",
        ),
        (
            "snapshot_parallelism = 0",
            "source.snapshot_parallelism: must be between 1 and 64",
        ),
    ] {
        let msg = error_of(&with(line));
        assert!(msg.contains(want), "want `{want}` in: {msg}");
    }
    let msg = error_of(&GOOD.replace(
        "path = \"feed.jsonl\"",
        "path = \"feed.jsonl\"\nsnapshot_method = \"export\"",
    ));
    assert!(
        msg.contains("source.snapshot_method: only applies to kind = \"postgres\""),
        "{msg}"
    );
}
