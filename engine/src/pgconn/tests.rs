use super::*;

const SECRET: &str = "hunter2-very-secret";

fn parse(dsn: &str) -> Result<PgSettings, DsnError> {
    PgSettings::parse(dsn)
}

fn ssl(dsn: &str) -> SslSettings {
    parse(dsn).expect("valid dsn").ssl
}

#[test]
fn every_sslmode_parses_in_both_forms() {
    for (text, mode) in [
        ("disable", SslMode::Disable),
        ("allow", SslMode::Allow),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ] {
        let kv = ssl(&format!("host=db user=u password={SECRET} sslmode={text}"));
        assert_eq!(kv.mode, mode, "{text}");
        let url = ssl(&format!("postgres://u:{SECRET}@db:5432/app?sslmode={text}"));
        assert_eq!(url.mode, mode, "{text}");
    }
    assert_eq!(
        ssl("host=db user=u").mode,
        SslMode::Prefer,
        "libpq's default"
    );
}

#[test]
fn tls_parameters_are_taken_out_and_the_rest_is_kept() {
    let settings = parse(
        "host=db port=6543 user=u password='a b\\'c' sslmode=verify-full sslrootcert='/etc/my ca.pem' \
         sslcert=/c.pem sslkey=/k.pem channel_binding=require dbname=app sslsni=0",
    )
    .expect("valid");
    assert_eq!(settings.ssl.mode, SslMode::VerifyFull);
    assert_eq!(
        settings.ssl.root_cert,
        Some(RootCert::File(PathBuf::from("/etc/my ca.pem")))
    );
    assert_eq!(settings.ssl.cert, Some(PathBuf::from("/c.pem")));
    assert_eq!(settings.ssl.key, Some(PathBuf::from("/k.pem")));
    assert_eq!(settings.ssl.channel_binding, ChannelBindingMode::Require);
    assert!(!settings.ssl.sni);
    let config = settings.config();
    assert_eq!(config.get_password(), Some(&b"a b'c"[..]));
    assert_eq!(config.get_dbname(), Some("app"));
    assert_eq!(config.get_ports(), [6543]);
    assert_eq!(
        config.get_channel_binding(),
        tokio_postgres::config::ChannelBinding::Require
    );

    let url = parse(&format!(
        "postgresql://u:{SECRET}@db.example.com:5432/app?sslmode=verify-ca&application_name=x&sslrootcert=%2Ftmp%2Fca.pem&sslcert=/c.pem&sslkey=/k.pem"
    ))
    .expect("valid url");
    assert_eq!(url.ssl.mode, SslMode::VerifyCa);
    assert_eq!(
        url.ssl.root_cert,
        Some(RootCert::File(PathBuf::from("/tmp/ca.pem")))
    );
    assert_eq!(url.config().get_application_name(), Some("x"));
    // Weir's own session settings come first; the DSN's `options` after them win.
    assert_eq!(
        url.config().get_options(),
        Some(weir_core::dsn::SESSION_SETTINGS)
    );
    let own = parse("host=db options='-c statement_timeout=5min'").expect("valid");
    assert_eq!(
        own.config().get_options().map(str::to_owned),
        Some(format!(
            "{} -c statement_timeout=5min",
            weir_core::dsn::SESSION_SETTINGS
        ))
    );
    assert_eq!(url.config().get_password(), Some(SECRET.as_bytes()));
    assert_eq!(url.hosts(), "db.example.com:5432");
    // A `?` in the password does not start the parameters.
    let tricky = parse("postgres://u:p?ss@db/app?sslmode=require").expect("valid");
    assert_eq!(tricky.ssl.mode, SslMode::Require);
    assert_eq!(tricky.config().get_password(), Some(&b"p?ss"[..]));
    // The last occurrence wins, as in libpq.
    assert_eq!(
        ssl("host=db sslmode=disable sslmode=verify-ca sslrootcert=/a").mode,
        SslMode::VerifyCa
    );
}

#[test]
fn sslrootcert_system_needs_verify_full() {
    assert_eq!(
        ssl("host=db sslmode=verify-full sslrootcert=system").root_cert,
        Some(RootCert::System)
    );
    for mode in ["require", "verify-ca", "prefer"] {
        let error = parse(&format!("host=db sslmode={mode} sslrootcert=system"))
            .expect_err("system roots need verify-full");
        assert!(error.to_string().contains("verify-full"), "{error}");
    }
}

#[test]
fn invalid_values_name_the_parameter_never_the_dsn() {
    let cases = [
        ("sslmode=verify-everything", "sslmode"),
        ("sslmode=REQUIRE", "sslmode"),
        ("channel_binding=always", "channel_binding"),
        ("sslnegotiation=direct", "sslnegotiation"),
        ("sslnegotiation=other", "sslnegotiation"),
        ("sslsni=yes", "sslsni"),
        ("sslcompression=2", "sslcompression"),
        ("gssencmode=require", "gssencmode"),
        ("sslrootcert=''", "sslrootcert"),
        ("sslcert=''", "sslcert"),
        ("sslkey=''", "sslkey"),
        ("sslpassword=x", "sslpassword"),
        ("sslcrl=/crl.pem", "sslcrl"),
        (
            "ssl_min_protocol_version=TLSv1.3",
            "ssl_min_protocol_version",
        ),
    ];
    for (param, name) in cases {
        for dsn in [
            format!("host=db user=u password={SECRET} {param}"),
            format!("postgres://u:{SECRET}@db/app?{}", param.replace("''", "")),
        ] {
            let error = parse(&dsn).expect_err(param);
            let shown = format!("{error} {error:?}");
            assert!(
                shown.contains(&format!("connection parameter {name}:")),
                "{param}: {shown}"
            );
            assert!(!shown.contains(SECRET), "{shown}");
            let value = param.split_once('=').map_or("", |(_, v)| v);
            if value.len() > 2 {
                assert!(!shown.contains(value), "the value is shown: {shown}");
            }
        }
    }
}

#[test]
fn syntax_errors_show_nothing_of_the_dsn() {
    for dsn in [
        format!("host=db password='{SECRET}"),
        format!("host=db password {SECRET}"),
        format!("postgres://u:{SECRET}@db:notaport/app"),
        format!("postgres://u:{SECRET}@db/app?sslmode=%ZZ"),
        format!("host=db nonsense={SECRET}"),
    ] {
        let error = parse(&dsn).expect_err(&dsn);
        assert!(
            matches!(
                error,
                DsnError::Syntax | DsnError::UnknownParameter | DsnError::Parameter { .. }
            ),
            "{error}"
        );
        assert!(!format!("{error} {error:?}").contains(SECRET));
    }
    // A bad value of a checked parameter names the parameter, an unknown name says so,
    // and libpq's files are refused by name.
    for (dsn, want) in [
        ("host=db port=5432x", Some("port")),
        ("host=db connect_timeout=abc", Some("connect_timeout")),
        ("host=db passfile=/p", Some("passfile")),
        ("host=db service=prod", Some("service")),
        ("host=db sslmdoe=require", None),
    ] {
        match parse(dsn).expect_err(dsn) {
            DsnError::Parameter { parameter, .. } => assert_eq!(Some(parameter), want, "{dsn}"),
            DsnError::UnknownParameter => assert_eq!(want, None, "{dsn}"),
            other => panic!("{dsn}: {other}"),
        }
    }
    let settings = parse(&format!("host=db password={SECRET}")).expect("valid");
    assert!(!format!("{settings:?}").contains(SECRET));
}

#[test]
fn verify_modes_need_roots_and_files_are_named() {
    let no_roots = SslSettings {
        mode: SslMode::VerifyFull,
        ..SslSettings::default()
    };
    // HOME points at a folder without ~/.postgresql in CI; skip if a real one exists.
    if default_file("root.crt").is_none() {
        let error = TlsSetup::new(&no_roots).expect_err("no roots");
        assert!(error.to_string().contains("sslrootcert"), "{error}");
    }
    let missing = SslSettings {
        mode: SslMode::VerifyCa,
        root_cert: Some(RootCert::File(PathBuf::from("/nonexistent/ca.pem"))),
        ..SslSettings::default()
    };
    let error = TlsSetup::new(&missing)
        .expect_err("a missing root file")
        .to_string();
    assert!(
        error.contains("sslrootcert /nonexistent/ca.pem: does not exist"),
        "{error}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("write");
    let error = TlsSetup::new(&SslSettings {
        mode: SslMode::Require,
        root_cert: Some(RootCert::File(junk)),
        ..SslSettings::default()
    })
    .expect_err("a junk root file")
    .to_string();
    assert!(error.contains("holds no PEM certificate"), "{error}");
    assert!(
        TlsSetup::new(&SslSettings {
            mode: SslMode::Disable,
            root_cert: Some(RootCert::File(PathBuf::from("/nonexistent"))),
            ..SslSettings::default()
        })
        .expect("disable reads no file")
        .is_none()
    );
}

#[test]
fn der_parsing_never_panics_and_finds_the_signature_algorithm() {
    // A minimal Certificate: SEQUENCE { SEQUENCE {} , SEQUENCE { OID ecdsa-with-SHA384 } }
    let cert = [
        0x30, 0x0E, 0x30, 0x00, 0x30, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03,
        0x03,
    ];
    assert_eq!(tls_server_end_point(&cert).map(|h| h.len()), Some(48));
    for end in 0..cert.len() {
        assert_eq!(tls_server_end_point(&cert[..end]), None);
    }
    let mut ed25519 = cert;
    ed25519[8..].copy_from_slice(&[0x2B, 0x65, 0x70, 0, 0, 0, 0, 0]);
    assert_eq!(tls_server_end_point(&ed25519), None);
}

#[test]
fn target_session_attrs_takes_libpqs_primary_and_refuses_standbys() {
    use tokio_postgres::config::TargetSessionAttrs as Attrs;
    for (text, attrs) in [
        ("any", Attrs::Any),
        ("read-write", Attrs::ReadWrite),
        ("primary", Attrs::ReadWrite),
    ] {
        let kv = parse(&format!(
            "host=a,b port=5432,5433 user=u target_session_attrs={text}"
        ))
        .expect("valid");
        assert_eq!(kv.config().get_target_session_attrs(), attrs, "{text}");
        let url = parse(&format!(
            "postgres://u@a:5432,b:5433/app?target_session_attrs={text}"
        ))
        .expect("valid");
        assert_eq!(url.config().get_target_session_attrs(), attrs, "{text}");
        assert_eq!(url.hosts(), "a:5432, b:5433");
    }
    for text in ["read-only", "standby", "prefer-standby"] {
        let error = parse(&format!("host=a user=u target_session_attrs={text}"))
            .expect_err("refused")
            .to_string();
        assert!(error.contains("any, read-write or primary"), "{error}");
    }
    let error = parse("host=a user=u target_session_attrs=sometimes")
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("must be one of any, read-write, primary"),
        "{error}"
    );
}

#[test]
fn each_host_of_a_multi_host_dsn_keeps_the_rest_of_the_settings() {
    let settings = parse(&format!(
        "host=a,b port=5432,5433 user=u password={SECRET} dbname=app sslmode=require connect_timeout=7 target_session_attrs=primary"
    ))
    .expect("valid");
    let hosts = settings.each_host();
    let names: Vec<&str> = hosts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a:5432", "b:5433"]);
    for (_, one) in &hosts {
        let c = one.config();
        assert_eq!(c.get_hosts().len(), 1);
        assert_eq!(c.get_ports().len(), 1);
        assert_eq!(c.get_user(), Some("u"));
        assert_eq!(c.get_password(), Some(SECRET.as_bytes()));
        assert_eq!(c.get_dbname(), Some("app"));
        assert_eq!(
            c.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(7))
        );
        assert_eq!(one.ssl.mode, SslMode::Require);
    }
    // One port for every host; one host gives itself.
    let shared = parse("host=a,b port=6000 user=u")
        .expect("valid")
        .each_host();
    assert_eq!(
        shared.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["a:6000", "b:6000"]
    );
    assert_eq!(parse("host=a user=u").expect("valid").each_host().len(), 1);
}

/// An unencoded `@` in a URL's password would make the rest of it the host name, shown
/// by every connection error: refused without a word of it.
#[test]
fn an_unencoded_at_in_a_url_password_is_refused_without_showing_it() {
    let error = parse(&format!(
        "postgres://u:{SECRET}@tail-of-it@localhost:5432/app"
    ))
    .expect_err("refused");
    let message = error.to_string();
    assert!(message.contains("%40"), "{message}");
    assert!(
        !message.contains("tail-of-it") && !message.contains(SECRET),
        "{message}"
    );
    let encoded =
        parse(&format!("postgres://u:{SECRET}%40tail@localhost:5432/app")).expect("valid");
    assert_eq!(
        encoded.config().get_password(),
        Some(format!("{SECRET}@tail").as_bytes())
    );
}

/// A client certificate made as PostgreSQL's documentation shows on OpenSSL 3 (`x509
/// -req` without extensions: X.509 version 1) is named as such, under `sslcert`, not
/// blamed on its key.
#[test]
fn a_version_1_client_certificate_is_named_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        "k.pem",
    ]);
    openssl(&[
        "pkcs8", "-topk8", "-nocrypt", "-in", "k.pem", "-out", "key.pem",
    ]);
    openssl(&[
        "req", "-new", "-key", "key.pem", "-subj", "/CN=weir", "-out", "c.csr",
    ]);
    openssl(&[
        "x509", "-req", "-in", "c.csr", "-signkey", "key.pem", "-days", "1", "-out", "c.pem",
    ]);
    let error = TlsSetup::new(&SslSettings {
        mode: SslMode::Require,
        cert: Some(dir.path().join("c.pem")),
        key: Some(dir.path().join("key.pem")),
        ..SslSettings::default()
    })
    .expect_err("a version 1 certificate")
    .to_string();
    assert!(
        error.contains("sslcert") && error.contains("X.509 version 1"),
        "{error}"
    );
}
