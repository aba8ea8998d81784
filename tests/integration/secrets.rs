//! Configuration errors and secrets: errors name the file and field and exit 2; a DSN's
//! password never appears in an error or a log line.

use crate::harness::{Order, SECRET_PASSWORD, SECRET_USER, TestDb, cluster, envelope, text};

#[tokio::test(flavor = "multi_thread")]
async fn config_errors_name_the_file_and_field_and_exit_2() {
    let db = TestDb::new("config_errors").await;
    db.write_config("", "grain = \"week\"", "");
    let text_before = std::fs::read_to_string(db.config_path()).expect("config");
    std::fs::write(
        db.config_path(),
        text_before.replace("grain = \"day\"\n", ""),
    )
    .expect("config");
    let out = db.weir(&["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&db.config_path().display().to_string()) && stderr.contains("week"),
        "{stderr}"
    );

    db.write_config("", "", "parallelism = 0");
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("engine.parallelism: must be between 1 and 64"),
        "{stderr}"
    );

    db.write_config("", "", "");
    let out = db
        .weir_command(&["init"])
        .env_remove("WEIR_TARGET_DSN")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("target.dsn_env: environment variable WEIR_TARGET_DSN is not set"),
        "{}",
        text(&out.stderr)
    );

    let out = db.weir(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dsn_password_never_appears_in_errors_or_logs() {
    let db = TestDb::new("secrets").await;
    let pg = cluster();
    let order = Order {
        id: 1,
        customer: "row-value-canary".into(),
        order_date: Some("2026-03-01".into()),
        amount: "1.00".into(),
        status: "new".into(),
    };
    db.write_feed(&[envelope("c", None, None, Some(&order))]);
    db.write_config("", "", "");
    let wrong = format!(
        "postgres://{SECRET_USER}:{SECRET_PASSWORD}-wrong@127.0.0.1:{}/{}",
        pg.port(),
        db.name
    );
    for args in [&["init"][..], &["run", "--once"], &["status"]] {
        let out = db
            .weir_command(args)
            .env("WEIR_TARGET_DSN", &wrong)
            .env("RUST_LOG", "trace")
            .output()
            .expect("run");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_ne!(
            out.status.code(),
            Some(0),
            "{args:?} must fail with a wrong password: {all}"
        );
        assert!(
            all.contains("password authentication failed") || all.contains("stage"),
            "{args:?}: a useful message: {all}"
        );
        assert!(
            !all.contains(SECRET_PASSWORD),
            "{args:?} leaked the password: {all}"
        );
    }
    let right = format!(
        "postgres://{SECRET_USER}:{SECRET_PASSWORD}@127.0.0.1:{}/{}",
        pg.port(),
        db.name
    );
    for args in [&["init"][..], &["run", "--once"], &["status", "--json"]] {
        let out = db
            .weir_command(args)
            .env("WEIR_TARGET_DSN", &right)
            .env("RUST_LOG", "trace")
            .output()
            .expect("run");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?}: {all}");
        assert!(
            !all.contains(SECRET_PASSWORD),
            "{args:?} leaked the password: {all}"
        );
        assert!(
            !all.contains("row-value-canary"),
            "{args:?} logged a row value: {all}"
        );
    }
}
