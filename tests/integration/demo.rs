//! `weir demo` runs to the end non-interactively.

use crate::harness::text;

#[test]
fn the_demo_runs_to_the_end_and_cleans_up() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("demo")
        .output()
        .expect("run weir demo");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("order 42 is now in: [(\"2026-03-02\", 1)]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("dead letters kept in weir.dead_letter: 1"),
        "{stdout}"
    );
    assert!(stdout.contains("Done."), "{stdout}");
}

/// The throwaway cluster is stopped and removed when its owner dies without cleaning
/// up (here: `weir demo` SIGKILLed right after the cluster started).
#[test]
fn a_killed_owner_leaves_no_cluster_behind() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("demo")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn weir demo");
    let stdout = child.stdout.take().expect("stdout");
    let mut port = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if let Some(rest) = line
            .trim()
            .strip_prefix("PostgreSQL listening on 127.0.0.1:")
        {
            port = rest.split(',').next().and_then(|p| p.parse::<u16>().ok());
            break;
        }
    }
    let port = port.expect("the demo prints its port");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "cluster is up"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the cluster on port {port} outlived its owner"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
