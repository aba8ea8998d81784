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

/// How to set up a [`LocalPg`] (test-only: its `Debug` shows the password).
#[derive(Debug, Clone, Default)]
pub struct LocalPgOptions {
    /// Server settings `(name, value)` written after the defaults: later ones win.
    pub extra_settings: Vec<(String, String)>,
    /// `(user, password)`: a LOGIN SUPERUSER role that must authenticate with
    /// [`LocalPgOptions::password_auth`] over TCP; every other connection (and that role
    /// over the socket) is `trust`.
    pub password_user: Option<(String, String)>,
    /// How the password user authenticates over TCP (and how its password is stored):
    /// scram-sha-256 unless set.
    pub password_auth: PasswordAuth,
    /// TLS (`ssl = on`) and the roles that may connect only over it.
    pub tls: Option<LocalPgTls>,
}

/// The TLS setup of a [`LocalPg`] (test-only: its `Debug` shows the password).
#[derive(Debug, Clone)]
pub struct LocalPgTls {
    /// `(user, password)`: a LOGIN SUPERUSER role let in over TCP only with TLS
    /// (`hostssl`, scram-sha-256); `hostnossl` rejects it.
    pub tls_user: (String, String),
    /// A LOGIN SUPERUSER role let in over TCP only with TLS and a client certificate
    /// whose CN is its name (`hostssl ... cert`); `hostnossl` rejects it.
    pub cert_user: String,
}

/// The PEM files of a TLS [`LocalPg`], in its temporary folder.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// Another CA, which signed nothing the server shows.
    pub other_ca: PathBuf,
    /// The server's certificate: subjectAltName `IP:127.0.0.1` only.
    pub server_cert: PathBuf,
    /// A client certificate for [`LocalPgTls::cert_user`] (CN), and its key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// The authentication method of [`LocalPgOptions::password_user`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PasswordAuth {
    /// `scram-sha-256`, with the password stored as a SCRAM verifier (the default).
    #[default]
    ScramSha256,
    /// `md5`, with the password stored as an MD5 hash (`password_encryption = md5`).
    Md5,
}

impl PasswordAuth {
    /// The name of the method in `pg_hba.conf` and in `password_encryption`.
    fn method(self) -> &'static str {
        match self {
            PasswordAuth::ScramSha256 => "scram-sha-256",
            PasswordAuth::Md5 => "md5",
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
        validate(options)?;
        let bin_dir = find_bin_dir()?;
        let proc_self = std::fs::metadata("/proc/self").map_err(io_err("stat /proc/self"))?;
        let run_as = if proc_self.uid() == 0 {
            Some(postgres_ids()?)
        } else {
            None
        };
        let tmp = tempfile::Builder::new().prefix("weir-pg-").tempdir();
        let root = tmp.map_err(io_err("create a temporary folder"))?.keep();
        // From here on, an early return drops `pg`: the server is stopped, `root` removed.
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
        pg.spawn_watchdog()?; // before initdb: covers a process killed while starting
        pg.initdb()?;
        if let Some(tls) = &options.tls {
            pg.make_certificates(tls)?;
        }
        pg.write_owned("pg_hba.conf", &hba_conf(options))?;
        let conf = pg.data_dir.join("postgresql.conf");
        let conf = std::fs::OpenOptions::new().append(true).open(conf);
        conf.and_then(|mut f| io::Write::write_all(&mut f, b"\ninclude 'weir.conf'\n"))
            .map_err(io_err("append to postgresql.conf"))?;
        pg.start_on_free_port(options)?;
        if let Some((user, password)) = &options.password_user {
            pg.create_password_user(user, password)?;
        }
        if let Some(tls) = &options.tls {
            pg.create_password_user(&tls.tls_user.0, &tls.tls_user.1)?;
            pg.create_role(&format!(
                "CREATE ROLE \"{}\" LOGIN SUPERUSER",
                tls.cert_user.replace('"', "\"\"")
            ))?;
        }
        tracing::info!(port = pg.port, data_dir = %pg.data_dir.display(), "local postgres started");
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

    /// Directory of the server's Unix socket (the temporary folder).
    pub fn socket_dir(&self) -> &Path {
        &self.root
    }

    /// The PostgreSQL bin directory in use (for `pg_recvlogical`, `psql`, ...).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The certificates of a cluster started with [`LocalPgOptions::tls`].
    pub fn tls_files(&self) -> Option<TlsFiles> {
        let dir = self.root.join("tls");
        dir.join("server.crt").is_file().then(|| TlsFiles {
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            server_cert: dir.join("server.crt"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        })
    }

    /// Makes the test CA, another CA, the server's certificate (for 127.0.0.1 only)
    /// and the client certificate, with the `openssl` command (EC P-256 keys,
    /// ecdsa-with-SHA256 signatures). The server's key is the server user's, mode 0600.
    fn make_certificates(&self, tls: &LocalPgTls) -> Result<(), LocalPgError> {
        let dir = self.root.join("tls");
        std::fs::create_dir(&dir).map_err(io_err("create the TLS folder"))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("make the TLS folder traversable"))?;
        let openssl = |args: &[&str]| {
            let mut cmd = Command::new("openssl");
            cmd.args(args).current_dir(&dir);
            run(&mut cmd, "openssl (apt-get install openssl)")
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, cn) in [("ca", "weir-test-ca"), ("other-ca", "weir-other-ca")] {
            let (key, crt, subject) = (
                format!("{name}.key"),
                format!("{name}.crt"),
                format!("/CN={cn}"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend([
                "-keyout", &key, "-out", &crt, "-days", "3650", "-subj", &subject,
            ]);
            openssl(&args)?;
        }
        let leaves = [
            (
                "server",
                "127.0.0.1",
                "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n",
            ),
            ("client", "", "extendedKeyUsage = clientAuth\n"),
        ];
        for (name, cn, extensions) in leaves {
            let cn = if cn.is_empty() {
                tls.cert_user.as_str()
            } else {
                cn
            };
            let ext = format!("{name}.ext");
            std::fs::write(
                dir.join(&ext),
                format!("basicConstraints = CA:FALSE\n{extensions}"),
            )
            .map_err(io_err("write a certificate extensions file"))?;
            let (key, csr, crt, subject) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("/CN={cn}"),
            );
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
            openssl(&args)?;
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "3650",
                "-extfile",
                &ext,
            ])?;
        }
        let key = dir.join("server.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("restrict the server key"))?;
        self.chown(&key)?;
        Ok(())
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

    /// Stops the server (`pg_ctl stop -m fast`, waiting for it). Blocking.
    pub fn stop(&self) -> Result<(), LocalPgError> {
        run(
            &mut self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]),
            "pg_ctl stop",
        )?;
        tracing::info!(port = self.port, "local postgres stopped");
        Ok(())
    }

    /// Stops the server if it runs, then starts it again on the same port and data dir. Blocking.
    pub fn restart(&self) -> Result<(), LocalPgError> {
        if run(&mut self.pg_ctl(&["status"]), "pg_ctl status").is_ok() {
            self.stop()?;
        }
        self.pg_ctl_start()?;
        tracing::info!(port = self.port, "local postgres restarted");
        Ok(())
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
            ("password_encryption", options.password_auth.method()),
        ];
        let tls_dir = self.root.join("tls");
        let tls_settings: Vec<(String, String)> = if options.tls.is_some() {
            let file = |name: &str| tls_dir.join(name).to_string_lossy().into_owned();
            vec![
                ("ssl".to_owned(), "on".to_owned()),
                ("ssl_cert_file".to_owned(), file("server.crt")),
                ("ssl_key_file".to_owned(), file("server.key")),
                ("ssl_ca_file".to_owned(), file("ca.crt")),
            ]
        } else {
            Vec::new()
        };
        let extra = tls_settings
            .iter()
            .chain(&options.extra_settings)
            .map(|(k, v)| (k.as_str(), v.as_str()));
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

    /// Creates a password role (see [`LocalPg::create_role`]).
    fn create_password_user(&self, user: &str, password: &str) -> Result<(), LocalPgError> {
        self.create_role(&format!(
            "CREATE ROLE \"{}\" LOGIN SUPERUSER PASSWORD '{}'",
            user.replace('"', "\"\""),
            password.replace('\'', "''")
        ))
    }

    /// Runs a CREATE ROLE through a private runtime on a scoped thread, so that this
    /// works whether or not the caller is inside a tokio runtime.
    fn create_role(&self, create: &str) -> Result<(), LocalPgError> {
        // The statement may hold a password: keep it out of server.log even if it fails.
        let sql =
            format!("SET log_min_error_statement = 'panic'; SET log_statement = 'none'; {create}");
        let dsn = self.dsn("postgres");
        let create = || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let runtime = runtime.map_err(io_err("build a tokio runtime"))?;
            runtime.block_on(run_sql(&dsn, "postgres", "create the password user", &sql))
        };
        std::thread::scope(|scope| scope.spawn(create).join()).unwrap_or_else(|_| {
            Err(io_err("create the password user")(io::Error::other(
                "thread panicked",
            )))
        })
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

fn validate(options: &LocalPgOptions) -> Result<(), LocalPgError> {
    let bad = |what: String| Err(LocalPgError::InvalidOption(what));
    for (name, value) in &options.extra_settings {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return bad(format!(
                "setting name {name:?} is not letters, digits, `_` and `.`"
            ));
        }
        if value.contains(['\n', '\r', '\0']) {
            return bad(format!("the value of setting {name} is not one line"));
        }
    }
    let mut users: Vec<&str> = options
        .password_user
        .iter()
        .map(|(u, _)| u.as_str())
        .collect();
    if let Some(tls) = &options.tls {
        users.extend([tls.tls_user.0.as_str(), tls.cert_user.as_str()]);
        if !tls
            .cert_user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad(format!(
                "cert user name {:?} is not letters, digits and `_`",
                tls.cert_user
            ));
        }
    }
    match users
        .iter()
        .find(|user| user.is_empty() || user.contains(['"', '\n', '\r', '\0']))
    {
        Some(user) => bad(format!(
            "user name {user:?} is empty or holds quotes or line breaks"
        )),
        None => Ok(()),
    }
}

/// First match wins: the password user over TCP needs its password method (scram-sha-256
/// unless [`LocalPgOptions::password_auth`] says otherwise), everything else is trust.
fn hba_conf(options: &LocalPgOptions) -> String {
    let mut out = String::from("# Written by weir's localpg.\n");
    for db in ["all", "replication"] {
        for net in ["127.0.0.1/32", "::1/128"] {
            if let Some(tls) = &options.tls {
                let (tls_user, cert_user) = (&tls.tls_user.0, &tls.cert_user);
                let _ = writeln!(out, "hostssl {db} \"{tls_user}\" {net} scram-sha-256");
                let _ = writeln!(out, "hostnossl {db} \"{tls_user}\" {net} reject");
                let _ = writeln!(out, "hostssl {db} \"{cert_user}\" {net} cert");
                let _ = writeln!(out, "hostnossl {db} \"{cert_user}\" {net} reject");
            }
            if let Some((user, _)) = &options.password_user {
                let method = options.password_auth.method();
                let _ = writeln!(out, "host {db} \"{user}\" {net} {method}");
            }
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
