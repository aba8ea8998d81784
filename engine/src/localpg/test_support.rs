//! The test support of [`LocalPg`]: TLS with a test CA, password users, extra server
//! settings, stopping and restarting the server. Built with the `test-support`
//! feature (the integration suite) and in the engine's unit tests, never in `weir`.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;

use super::{LocalPg, LocalPgError, LocalPgOptions, io_err, run, run_sql};

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

impl LocalPg {
    /// Before the server starts: the certificates of [`LocalPgOptions::tls`].
    pub(super) fn before_start(&self, options: &LocalPgOptions) -> Result<(), LocalPgError> {
        if let Some(tls) = &options.tls {
            self.make_certificates(tls)?;
        }
        Ok(())
    }

    /// Once the server runs: the roles of [`LocalPgOptions::password_user`] and
    /// [`LocalPgOptions::tls`].
    pub(super) fn create_roles(&self, options: &LocalPgOptions) -> Result<(), LocalPgError> {
        if let Some((user, password)) = &options.password_user {
            self.create_password_user(user, password)?;
        }
        if let Some(tls) = &options.tls {
            self.create_password_user(&tls.tls_user.0, &tls.tls_user.1)?;
            self.create_role(&format!(
                "CREATE ROLE \"{}\" LOGIN SUPERUSER",
                tls.cert_user.replace('"', "\"\"")
            ))?;
        }
        Ok(())
    }

    /// Directory of the server's Unix socket (the temporary folder).
    pub fn socket_dir(&self) -> &Path {
        &self.root
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

    /// A streaming standby of this cluster, started on a free port (test-only). The
    /// primary is stopped cleanly, its data folder copied and the primary started again
    /// (a cold base backup: the server packages the test matrix installs carry no
    /// `pg_basebackup`); the copy drops the primary's replication slots (a standby's are
    /// its own or synchronized ones) and follows the primary through the physical slot
    /// `primary_slot`, which must exist there, with `hot_standby_feedback` and, from
    /// PostgreSQL 17, `sync_replication_slots` on: failover slots are synchronized to it.
    /// `options`' own settings come after these, and win. Blocking.
    pub fn start_standby(
        &self,
        options: &LocalPgOptions,
        primary_slot: &str,
    ) -> Result<LocalPg, LocalPgError> {
        let mut standby = LocalPg::new_folder(self.bin_dir.clone())?;
        self.stop()?;
        let copied = super::run(
            Command::new("cp")
                .arg("-a")
                .arg(&self.data_dir)
                .arg(&standby.data_dir),
            "cp -a (the primary's data folder)",
        );
        let restarted = self.pg_ctl_start();
        copied?;
        restarted?;
        for file in ["postmaster.pid", "postmaster.opts"] {
            let _ = std::fs::remove_file(standby.data_dir.join(file));
        }
        let slots = standby.data_dir.join("pg_replslot");
        for entry in std::fs::read_dir(&slots).map_err(io_err("read pg_replslot"))? {
            let entry = entry.map_err(io_err("read pg_replslot"))?;
            std::fs::remove_dir_all(entry.path()).map_err(io_err("remove a copied slot"))?;
        }
        standby.write_owned("standby.signal", "")?;
        let major: u32 = std::fs::read_to_string(self.data_dir.join("PG_VERSION"))
            .map_err(io_err("read PG_VERSION"))?
            .trim()
            .parse()
            .unwrap_or(0);
        let mut options = options.clone();
        let conninfo = format!(
            "host={} port={} user=postgres dbname=postgres application_name=weir_standby",
            self.host(),
            self.port
        );
        let mut settings = vec![
            ("primary_conninfo", conninfo),
            ("primary_slot_name", primary_slot.to_owned()),
            ("hot_standby", "on".to_owned()),
            ("hot_standby_feedback", "on".to_owned()),
        ];
        if major >= 17 {
            settings.push(("sync_replication_slots", "on".to_owned()));
        }
        let own = std::mem::take(&mut options.extra_settings);
        options.extra_settings = settings
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .chain(own)
            .collect();
        standby.start_on_free_port(&options)?;
        tracing::info!(
            port = standby.port,
            primary = self.port,
            "local postgres standby started"
        );
        Ok(standby)
    }

    /// Kills the server's postmaster with SIGKILL, as a crash of its machine would end
    /// it (its backends exit when they notice), and waits until it is gone. Blocking.
    pub fn kill(&self) -> Result<(), LocalPgError> {
        let pid_file = std::fs::read_to_string(self.data_dir.join("postmaster.pid"))
            .map_err(io_err("read postmaster.pid"))?;
        let pid = pid_file.lines().next().unwrap_or("").trim().to_owned();
        super::run(
            Command::new("kill").args(["-KILL", &pid]),
            "kill -KILL (the postmaster)",
        )?;
        let proc = Path::new("/proc").join(&pid);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while proc.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::info!(port = self.port, "local postgres killed");
        Ok(())
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, waiting for it). Blocking.
    pub fn promote(&self) -> Result<(), LocalPgError> {
        super::run(
            &mut self.pg_ctl(&["-w", "-t", "60", "promote"]),
            "pg_ctl promote",
        )?;
        tracing::info!(port = self.port, "local postgres promoted");
        Ok(())
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

/// `password_encryption`: the method of [`LocalPgOptions::password_auth`].
pub(super) fn password_encryption(options: &LocalPgOptions) -> &'static str {
    options.password_auth.method()
}

/// The server settings after the defaults: TLS, then [`LocalPgOptions::extra_settings`]
/// (later ones win). `root` is the cluster's temporary folder.
pub(super) fn settings(root: &Path, options: &LocalPgOptions) -> Vec<(String, String)> {
    let tls_dir = root.join("tls");
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
    tls_settings
        .into_iter()
        .chain(options.extra_settings.iter().cloned())
        .collect()
}

/// The `pg_hba.conf` lines of the test roles for `db` from `net`, before the trust
/// line: the password user over TCP needs its password method (scram-sha-256 unless
/// [`LocalPgOptions::password_auth`] says otherwise), the TLS roles TLS.
pub(super) fn hba_lines(out: &mut String, options: &LocalPgOptions, db: &str, net: &str) {
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
}

/// Refuses settings and user names that would break the files they are written to.
pub(super) fn validate(options: &LocalPgOptions) -> Result<(), LocalPgError> {
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
