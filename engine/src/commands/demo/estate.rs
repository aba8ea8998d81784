//! The demo's estate: the config of its pipeline, the orders plugin it runs, and the
//! connections to its two databases.

use std::path::{Path, PathBuf};

use super::{DemoError, PLUGIN_FILE, RATE, SLOT, TARGET_TABLE};

/// The demo's config: the source database's `orders` over logical replication, through
/// the orders plugin at `plugin` (a TOML string, quoted).
pub(super) fn pg_config(plugin_toml: &str) -> String {
    format!(
        r#"# weir demo: PostgreSQL logical replication -> stage -> orders plugin -> partitions
[source]
kind = "postgres"
dsn_env = "WEIR_SOURCE_DSN"      # the DSNs come from the environment, never the file
slot = "{SLOT}"
publication = "{SLOT}"

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "WEIR_TARGET_DSN"

[engine]
flush_interval_ms = 200          # write dirty partitions five times a second
parallelism = 2

[[table]]
source = "public.orders"
target = "{TARGET_TABLE}"
key = ["id"]
partition_by = "order_date"
grain = "day"
plugin = {plugin_toml}
on_reject = "dead-letter"
[table.plugin_config]
rate = "{RATE}"                  # amount_eur = amount x rate, exact decimal
"#
    )
}

/// Where the plugin is looked for, in order: `$WEIR_PLUGINS_DIR` alone if it is set,
/// else `$CARGO_TARGET_DIR/plugins`, `~/.cache/weir-target/plugins` (what
/// `scripts/demo` and `scripts/test` build) and `~/.cache/weir-plugins`
/// (`scripts/build-plugins`' default).
pub(super) fn plugin_candidates(
    plugins_dir: Option<&Path>,
    cargo_target_dir: Option<&Path>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    if let Some(dir) = plugins_dir {
        return vec![dir.join(PLUGIN_FILE)];
    }
    let mut out = Vec::new();
    if let Some(target) = cargo_target_dir {
        out.push(target.join("plugins").join(PLUGIN_FILE));
    }
    if let Some(home) = home {
        out.push(home.join(".cache/weir-target/plugins").join(PLUGIN_FILE));
        out.push(home.join(".cache/weir-plugins").join(PLUGIN_FILE));
    }
    out.dedup();
    out
}

/// The plugin to use: `explicit` if given (it must exist), else the first of
/// [`plugin_candidates`] from the environment that exists.
pub(super) fn find_plugin(explicit: Option<&Path>) -> Result<PathBuf, DemoError> {
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let candidates = match explicit {
        Some(path) => vec![path.to_owned()],
        None => plugin_candidates(
            env_path("WEIR_PLUGINS_DIR").as_deref(),
            env_path("CARGO_TARGET_DIR").as_deref(),
            env_path("HOME").as_deref(),
        ),
    };
    match candidates.iter().find(|p| p.is_file()) {
        Some(path) => Ok(std::path::absolute(path)?),
        None => Err(DemoError::PluginNotFound {
            searched: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// A connection to one of the demo's databases.
#[derive(Debug)]
pub(super) struct Db {
    pub(super) client: tokio_postgres::Client,
    database: &'static str,
}

impl Db {
    pub(super) async fn connect(dsn: &str, database: &'static str) -> Result<Db, DemoError> {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .map_err(|source| DemoError::Query { database, source })?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "demo connection ended with an error");
            }
        });
        Ok(Db { client, database })
    }

    pub(super) fn err(&self) -> impl FnOnce(tokio_postgres::Error) -> DemoError + '_ {
        move |source| DemoError::Query {
            database: self.database,
            source,
        }
    }

    pub(super) async fn batch(&self, sql: &str) -> Result<(), DemoError> {
        self.client.batch_execute(sql).await.map_err(self.err())
    }

    pub(super) async fn count(&self, sql: &str) -> Result<i64, DemoError> {
        let row = self.client.query_one(sql, &[]).await.map_err(self.err())?;
        Ok(row.get(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_is_looked_for_in_weir_plugins_dir_alone_or_the_usual_places() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            plugin_candidates(Some(&p("/x")), Some(&p("/t")), Some(&p("/h"))),
            [p("/x/orders-rust.wasm")]
        );
        assert_eq!(
            plugin_candidates(None, Some(&p("/t")), Some(&p("/h"))),
            [
                p("/t/plugins/orders-rust.wasm"),
                p("/h/.cache/weir-target/plugins/orders-rust.wasm"),
                p("/h/.cache/weir-plugins/orders-rust.wasm"),
            ]
        );
        assert!(plugin_candidates(None, None, None).is_empty());
    }

    #[test]
    fn a_missing_plugin_says_how_to_build_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("orders-rust.wasm");
        let error = find_plugin(Some(&missing)).expect_err("missing");
        let text = error.to_string();
        assert!(text.contains(&missing.display().to_string()), "{text}");
        assert!(text.contains("scripts/build-plugins"), "{text}");
        assert!(text.contains("scripts/demo"), "{text}");
    }
}
