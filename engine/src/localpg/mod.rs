//! A throwaway local PostgreSQL cluster, for the integration tests and `weir demo`.
//!
//! Guarantees:
//! - No system service is used: a fresh cluster is made with the server binaries of
//!   `WEIR_PG_BIN`, or of the highest version in `/usr/lib/postgresql/*/bin`, in a new
//!   temporary folder `weir-pg-*` holding the data dir, the Unix socket and `server.log`.
//! - The server listens on 127.0.0.1 only, on a free port, with `wal_level=logical` and
//!   no durability (fsync, synchronous commit and full page writes off).
//! - As root (where `initdb` refuses to run) the server binaries run as the `postgres`
//!   system user through `runuser`; otherwise as the current user.
//! - Dropping a [`LocalPg`] stops the server and removes the folder. If the process dies
//!   without dropping it (panic, SIGKILL, Ctrl-C, a `static`), a detached watchdog shell
//!   does the same within about half a second.
//! - No error or log line holds the password of [`LocalPgOptions::password_user`] or
//!   of [`LocalPgTls::tls_user`].
//! - With [`LocalPgOptions::tls`], the server has `ssl = on` with a test CA, a server
//!   certificate for `127.0.0.1` only (not `localhost`) and a client certificate, made
//!   with the `openssl` command ([`LocalPg::tls_files`]).
//!
//! Two parts. Always built, for `weir demo` and the benchmarks: a cluster with
//! `LocalPgOptions::default()`, its databases and DSNs. With the `test-support`
//! feature (or in the engine's unit tests) also, in `test_support.rs`: TLS, password
//! users, extra server settings, stopping and restarting the server. The integration
//! suite turns the feature on through the package's dev-dependency on itself.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const HOST: &str = "127.0.0.1";
const START_ATTEMPTS: u32 = 5;

/// Why a local cluster could not be started, used or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LocalPgError {
    #[error(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {0}: install the \
         `postgresql` package (apt-get install postgresql) or set WEIR_PG_BIN to their directory"
    )]
    BinariesNotFound(String),
    #[error(
        "running as root, where initdb refuses to run, and there is no `postgres` system user to \
         run it as: install the `postgresql` package (apt-get install postgresql), which creates it"
    )]
    NoPostgresUser,
    #[error("invalid local PostgreSQL option: {0}")]
    InvalidOption(String),
    #[error("could not {what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("`{command}` failed ({status}): {output}")]
    Command {
        command: String,
        status: String,
        output: String,
    },
    #[error(
        "the local PostgreSQL server did not start: {output}\nlast lines of server.log:\n{log_tail}"
    )]
    Start { output: String, log_tail: String },
    #[error("could not {what} (database `{database}`) on the local PostgreSQL server: {detail}")]
    Sql {
        what: &'static str,
        database: String,
        detail: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// How to set up a [`LocalPg`]: `weir demo` and the benchmarks use the default; the
/// fields are test support (test-only: its `Debug` shows the password).
#[derive(Debug, Clone, Default)]
pub struct LocalPgOptions {
    #[cfg(any(test, feature = "test-support"))]
    /// Server settings `(name, value)` written after the defaults: later ones win.
    pub extra_settings: Vec<(String, String)>,
    #[cfg(any(test, feature = "test-support"))]
    /// `(user, password)`: a LOGIN SUPERUSER role that must authenticate with
    /// [`LocalPgOptions::password_auth`] over TCP; every other connection (and that role
    /// over the socket) is `trust`.
    pub password_user: Option<(String, String)>,
    #[cfg(any(test, feature = "test-support"))]
    /// How the password user authenticates over TCP (and how its password is stored):
    /// scram-sha-256 unless set.
    pub password_auth: PasswordAuth,
    #[cfg(any(test, feature = "test-support"))]
    /// TLS (`ssl = on`) and the roles that may connect only over it.
    pub tls: Option<LocalPgTls>,
}

#[cfg(any(test, feature = "test-support"))]
mod test_support;
#[cfg(any(test, feature = "test-support"))]
pub use test_support::{LocalPgTls, PasswordAuth, TlsFiles};

/// Test support compiled out: a cluster has none of the test options (TLS, password
/// users, extra settings), and these hooks of [`LocalPg::start`] do nothing.
#[cfg(not(any(test, feature = "test-support")))]
mod test_support {
    use std::path::Path;

    use super::{LocalPg, LocalPgError, LocalPgOptions};

    pub(super) fn validate(_: &LocalPgOptions) -> Result<(), LocalPgError> {
        Ok(())
    }

    pub(super) fn password_encryption(_: &LocalPgOptions) -> &'static str {
        "scram-sha-256"
    }

    pub(super) fn settings(_: &Path, _: &LocalPgOptions) -> Vec<(String, String)> {
        Vec::new()
    }

    pub(super) fn hba_lines(_: &mut String, _: &LocalPgOptions, _: &str, _: &str) {}

    impl LocalPg {
        pub(super) fn before_start(&self, _: &LocalPgOptions) -> Result<(), LocalPgError> {
            Ok(())
        }

        pub(super) fn create_roles(&self, _: &LocalPgOptions) -> Result<(), LocalPgError> {
            Ok(())
        }
    }
}

/// A running throwaway cluster; superuser `postgres` connects without password.
#[derive(Debug)]
pub struct LocalPg {
    root: PathBuf,
    data_dir: PathBuf,
    bin_dir: PathBuf,
    port: u16,
    /// `(uid, gid)` of the `postgres` user when we run as root.
    run_as: Option<(u32, u32)>,
    watchdog: Option<Child>,
}

impl LocalPg {
    /// Starts a new cluster; blocking (uses std::process), call from spawn_blocking or
    /// non-async code. On error, whatever was made so far is stopped and removed.
    pub fn start(options: &LocalPgOptions) -> Result<LocalPg, LocalPgError> {
        test_support::validate(options)?;
        // From here on, an early return drops `pg`: the server is stopped, `root` removed.
        let mut pg = LocalPg::new_folder(find_bin_dir()?)?;
        pg.initdb()?;
        pg.before_start(options)?;
        pg.write_owned("pg_hba.conf", &hba_conf(options))?;
        let conf = pg.data_dir.join("postgresql.conf");
        let conf = std::fs::OpenOptions::new().append(true).open(conf);
        conf.and_then(|mut f| io::Write::write_all(&mut f, b"\ninclude 'weir.conf'\n"))
            .map_err(io_err("append to postgresql.conf"))?;
        pg.start_on_free_port(options)?;
        pg.create_roles(options)?;
        tracing::info!(port = pg.port, data_dir = %pg.data_dir.display(), "local postgres started");
        Ok(pg)
    }

    /// A new temporary folder for a cluster of `bin_dir`'s server, owned by the server's
    /// user, with its cleanup watchdog running (before anything can start a server in
    /// it: this covers a process killed while starting). Nothing is in it yet.
    fn new_folder(bin_dir: PathBuf) -> Result<LocalPg, LocalPgError> {
        let proc_self = std::fs::metadata("/proc/self").map_err(io_err("stat /proc/self"))?;
        let run_as = if proc_self.uid() == 0 {
            Some(postgres_ids()?)
        } else {
            None
        };
        let tmp = tempfile::Builder::new().prefix("weir-pg-").tempdir();
        let root = tmp.map_err(io_err("create a temporary folder"))?.keep();
        let data_dir = root.join("data");
        let mut pg = LocalPg {
            root,
            data_dir,
            bin_dir,
            port: 0,
            run_as,
            watchdog: None,
        };
        std::fs::set_permissions(&pg.root, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("make the temporary folder world-traversable"))?;
        pg.chown(&pg.root)?;
        pg.spawn_watchdog()?;
        Ok(pg)
    }

    /// TCP port of the server; the same across [`LocalPg::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Host of the server: always `127.0.0.1`.
    pub fn host(&self) -> &str {
        HOST
    }

    /// The PostgreSQL bin directory in use (for `pg_recvlogical`, `psql`, ...).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// DSN (URL form) for `database` as superuser `postgres` over TCP:
    /// `postgres://postgres@127.0.0.1:PORT/DB`, the name percent-encoded.
    pub fn dsn(&self, database: &str) -> String {
        let mut db = String::new();
        for b in database.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                db.push(char::from(b));
            } else {
                let _ = write!(db, "%{b:02X}");
            }
        }
        format!("postgres://postgres@{HOST}:{}/{db}", self.port)
    }

    /// Creates a database (async, via tokio-postgres to the `postgres` db), returns its DSN.
    pub async fn create_database(&self, name: &str) -> Result<String, LocalPgError> {
        let sql = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
        run_sql(&self.dsn("postgres"), "postgres", "create a database", &sql).await?;
        Ok(self.dsn(name))
    }

    /// Runs SQL statements (simple query protocol) in database `db`.
    pub async fn execute(&self, db: &str, sql: &str) -> Result<(), LocalPgError> {
        run_sql(&self.dsn(db), db, "run SQL", sql).await
    }

    /// A command running `program` of the bin dir, as `postgres` when we are root.
    fn pg_command(&self, program: &str) -> Command {
        let exe = self.bin_dir.join(program);
        let mut cmd = Command::new(if self.run_as.is_some() {
            Path::new("runuser")
        } else {
            &exe
        });
        if self.run_as.is_some() {
            cmd.args(["-u", "postgres", "--"]).arg(&exe);
        }
        // A cwd that `postgres` may not enter (such as /root) makes the tools complain.
        cmd.current_dir(&self.root).env_remove("PGDATA");
        cmd
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("-D").arg(&self.data_dir).args(args);
        cmd
    }

    fn chown(&self, path: &Path) -> Result<(), LocalPgError> {
        let Some((uid, gid)) = self.run_as else {
            return Ok(());
        };
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io_err(format!(
            "give {} to the postgres user",
            path.display()
        )))
    }

    /// Writes a file of the data dir, owned by the server's user.
    fn write_owned(&self, name: &str, contents: &str) -> Result<(), LocalPgError> {
        let path = self.data_dir.join(name);
        std::fs::write(&path, contents).map_err(io_err(format!("write {}", path.display())))?;
        self.chown(&path)
    }

    fn initdb(&self) -> Result<(), LocalPgError> {
        let initdb = |locale: &str| {
            let mut cmd = self.pg_command("initdb");
            cmd.arg("-D")
                .arg(&self.data_dir)
                .args(["-U", "postgres", "-A", "trust"]);
            cmd.args(["--encoding=UTF8", "--no-sync"]);
            run(cmd.arg(format!("--locale={locale}")), "initdb")
        };
        if let Err(error) = initdb("C.UTF-8") {
            tracing::warn!(%error, "initdb with locale C.UTF-8 failed, retrying with locale C");
            if self.data_dir.exists() {
                std::fs::remove_dir_all(&self.data_dir)
                    .map_err(io_err("remove a failed data dir"))?;
            }
            initdb("C")?;
        }
        Ok(())
    }

    /// Writes `weir.conf` with a free port and starts the server; retries on a port race.
    fn start_on_free_port(&mut self, options: &LocalPgOptions) -> Result<(), LocalPgError> {
        for attempt in 1.. {
            let listener = std::net::TcpListener::bind((HOST, 0));
            let addr = listener
                .and_then(|l| l.local_addr())
                .map_err(io_err("find a free port"))?;
            self.port = addr.port(); // the listener is dropped: the port is free again
            self.write_owned("weir.conf", &self.settings(options))?;
            // A fresh log per attempt, so that an old bind error is not taken for a new one.
            match std::fs::remove_file(self.root.join("server.log")) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(io_err("remove server.log")(e))?
                }
                _ => {}
            }
            match self.pg_ctl_start() {
                Err(LocalPgError::Start { log_tail, .. })
                    if attempt < START_ATTEMPTS && log_tail.contains("could not bind") =>
                {
                    tracing::warn!(
                        port = self.port,
                        attempt,
                        "local postgres port taken, retrying"
                    );
                }
                result => return result,
            }
        }
        Ok(())
    }

    fn settings(&self, options: &LocalPgOptions) -> String {
        let (port, root) = (self.port.to_string(), self.root.to_string_lossy());
        let defaults: [(&str, &str); 14] = [
            ("listen_addresses", HOST),
            ("port", &port),
            ("unix_socket_directories", &root),
            ("wal_level", "logical"),
            ("max_wal_senders", "100"),
            ("max_replication_slots", "100"),
            ("max_connections", "300"),
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("full_page_writes", "off"),
            ("shared_buffers", "128MB"),
            ("log_min_messages", "warning"),
            ("logging_collector", "off"),
            (
                "password_encryption",
                test_support::password_encryption(options),
            ),
        ];
        let extra = test_support::settings(&self.root, options);
        let extra = extra.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let mut out = String::from("# Written by weir's localpg; later lines win.\n");
        for (name, value) in defaults.into_iter().chain(extra) {
            let _ = writeln!(out, "{name} = '{}'", value.replace('\'', "''"));
        }
        out
    }

    fn pg_ctl_start(&self) -> Result<(), LocalPgError> {
        let log = self.root.join("server.log");
        let mut cmd = self.pg_ctl(&["-w", "-t", "60", "-l"]);
        match run(cmd.arg(&log).arg("start"), "pg_ctl start") {
            Err(LocalPgError::Command { output, .. }) => {
                let log =
                    String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
                Err(LocalPgError::Start {
                    output,
                    log_tail: tail(&log),
                })
            }
            result => result,
        }
    }

    /// Spawns a detached `sh` (own session, so a Ctrl-C to our process group misses it)
    /// that, once our process is gone (or a zombie), stops the server and removes the
    /// folder; it exits quietly as soon as the folder is gone. Returns once the shell runs
    /// in its new session: a signal to our group in between would otherwise kill it.
    fn spawn_watchdog(&mut self) -> Result<(), LocalPgError> {
        let quote = |p: &Path| format!("'{}'", p.to_string_lossy().replace('\'', "'\\''"));
        let su = if self.run_as.is_some() {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "echo ready; exec >/dev/null\n\
             p={pid}; d={root}\n\
             alive() {{ [ -d \"$d\" ] && kill -0 \"$p\" 2>/dev/null && \
             ! grep -qs '^State:[[:space:]]*Z' \"/proc/$p/status\"; }}\n\
             while alive; do sleep 0.5; done\n\
             [ -d \"$d\" ] || exit 0\n\
             {su}{pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1\n\
             rm -rf -- \"$d\"\n",
            pid = std::process::id(),
            root = quote(&self.root),
            pg_ctl = quote(&self.bin_dir.join("pg_ctl")),
            data = quote(&self.data_dir),
        );
        let mut cmd = Command::new("setsid");
        cmd.args(["sh", "-c", &script])
            .current_dir("/")
            .stdin(Stdio::null());
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn();
        let watchdog = self
            .watchdog
            .insert(child.map_err(io_err("spawn the watchdog (setsid sh)"))?);
        let mut ready = [0; 6];
        let stdout = watchdog
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"));
        stdout
            .and_then(|mut out| io::Read::read_exact(&mut out, &mut ready))
            .map_err(io_err("start the cleanup watchdog (setsid sh)"))
    }
}

impl Drop for LocalPg {
    /// Stops the server (`-m immediate`) and removes the folder; never panics.
    fn drop(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let running = self.data_dir.join("postmaster.pid").exists();
        if running
            && let Err(error) = run(
                &mut self.pg_ctl(&["-m", "immediate", "stop"]),
                "pg_ctl stop",
            )
        {
            tracing::warn!(%error, "could not stop the local postgres server");
        }
        match std::fs::remove_dir_all(&self.root) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                tracing::warn!(error = %e, root = %self.root.display(), "could not remove local postgres");
            }
            _ => tracing::info!(port = self.port, "local postgres removed"),
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> LocalPgError {
    let what = what.into();
    move |source| LocalPgError::Io { what, source }
}

/// Runs `cmd` to completion; on failure the error holds the tail of its output.
fn run(cmd: &mut Command, what: &str) -> Result<(), LocalPgError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("run `{what}`")))?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    let (command, status) = (what.to_owned(), out.status.to_string());
    Err(LocalPgError::Command {
        command,
        status,
        output: tail(&output),
    })
}

async fn run_sql(dsn: &str, db: &str, what: &'static str, sql: &str) -> Result<(), LocalPgError> {
    let sql_err = |what| {
        move |source: tokio_postgres::Error| {
            let detail = source
                .as_db_error()
                .map_or_else(|| source.to_string(), |e| e.message().to_owned());
            LocalPgError::Sql {
                what,
                database: db.to_owned(),
                detail,
                source,
            }
        }
    };
    let connect = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await;
    let (client, connection) = connect.map_err(sql_err("connect"))?;
    let connection = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "local postgres connection ended with an error");
        }
    });
    let result = client.batch_execute(sql).await.map_err(sql_err(what));
    drop(client);
    let _ = connection.await;
    result
}

/// First match wins: the test roles' lines first (`test_support::hba_lines`),
/// everything else is trust.
fn hba_conf(options: &LocalPgOptions) -> String {
    let mut out = String::from("# Written by weir's localpg.\n");
    for db in ["all", "replication"] {
        for net in ["127.0.0.1/32", "::1/128"] {
            test_support::hba_lines(&mut out, options, db, net);
            let _ = writeln!(out, "host {db} all {net} trust");
        }
        let _ = writeln!(out, "local {db} all trust");
    }
    out
}

/// `WEIR_PG_BIN` if set, else the highest `/usr/lib/postgresql/<version>/bin` with the server binaries.
fn find_bin_dir() -> Result<PathBuf, LocalPgError> {
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    if let Some(dir) = std::env::var_os("WEIR_PG_BIN").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if complete(&dir) {
            Ok(dir)
        } else {
            Err(LocalPgError::BinariesNotFound(format!(
                "{} (WEIR_PG_BIN)",
                dir.display()
            )))
        };
    }
    let mut best: Option<(Vec<u32>, PathBuf)> = None;
    for entry in std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name();
        let version = name
            .to_str()
            .and_then(|n| n.split('.').map(|p| p.parse().ok()).collect());
        let bin = entry.path().join("bin");
        if let Some(version) = version
            && complete(&bin)
            && best.as_ref().is_none_or(|(v, _)| &version > v)
        {
            best = Some((version, bin));
        }
    }
    let searched = || LocalPgError::BinariesNotFound("/usr/lib/postgresql/*/bin".to_owned());
    best.map(|(_, bin)| bin).ok_or_else(searched)
}

fn postgres_ids() -> Result<(u32, u32), LocalPgError> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().parse().ok())?
    };
    id("-u").zip(id("-g")).ok_or(LocalPgError::NoPostgresUser)
}

/// The last 30 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
