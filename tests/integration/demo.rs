//! `weir demo` runs to the end non-interactively, and leaves nothing behind when it is
//! interrupted or killed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::text;
use crate::plugins::plugin;

/// `weir demo` with the orders plugin the suite built, output piped.
fn demo_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("demo")
        .arg("--plugin")
        .arg(plugin("orders-rust"))
        .stdin(Stdio::null());
    cmd
}

/// The port in the demo's `PostgreSQL listening on 127.0.0.1:PORT, ...` line.
fn port_of(line: &str) -> Option<u16> {
    let rest = line
        .trim()
        .strip_prefix("PostgreSQL listening on 127.0.0.1:")?;
    rest.split(',').next()?.parse().ok()
}

/// The pid in a `... # weir run is live (pid N)` line.
fn live_pid_of(line: &str) -> Option<u32> {
    let rest = line.split("weir run is live (pid ").nth(1)?;
    rest.split(')').next()?.parse().ok()
}

/// Processes working in `folder` (the demo runs its `weir` children there): children
/// left behind. A zombie has no working directory and does not count.
fn processes_in(folder: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if cwd.to_string_lossy().starts_with(folder) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// A progress line: `  1.0s  changes orders ...`.
fn is_progress_line(line: &str) -> bool {
    line.split_whitespace()
        .next()
        .and_then(|t| t.strip_suffix('s'))
        .is_some_and(|t| t.parse::<f64>().is_ok())
}

fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// The whole demo: live engine under a workload, a SIGKILL and restart with nothing
/// lost, a restatement that rewrites both partitions, verify, and the cleanup.
#[test]
fn the_demo_runs_to_the_end_and_cleans_up() {
    let started = Instant::now();
    let out = demo_command().output().expect("run weir demo");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        text(&out.stderr)
    );
    eprintln!(
        "{stdout}\n(the demo took {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    for fact in [
        // The engine was SIGKILLed while the workload wrote, and restarted.
        ">> SIGKILL weir run (pid ",
        ">> restarted: $ weir --config weir.toml run",
        // Nothing lost across the kill.
        "missing 0, extra 0, different 0; rejected rows in weir.dead_letter: 1 of 1",
        "ok: the target equals the source, nothing lost and nothing duplicated across the SIGKILL",
        // The restatement.
        "ok: both partitions rewritten, the order is in the target exactly once, in the new partition",
        "verify passed: 7 partitions",
        "weir.dead_letter holds 1 rejected row(s):",
        "amount is negative",
        "weir run stopped, the cluster stopped, its files removed. Done.",
    ] {
        assert!(stdout.contains(fact), "missing {fact:?} in:\n{stdout}");
    }
    // The digests of source and target are printed and equal.
    let md5s: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("source  ") || l.trim_start().starts_with("target  ")
        })
        .filter_map(|l| l.split("md5 ").nth(1))
        .collect();
    assert_eq!(md5s.len(), 2, "{stdout}");
    assert_eq!(md5s[0], md5s[1], "{stdout}");
    // The restated order is in the target once, in its new day.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("in the target: 1 row(s), in 2026-03-05")),
        "{stdout}"
    );
    // The cluster, the live engine and the folder are gone.
    let port = stdout
        .lines()
        .find_map(port_of)
        .expect("the demo prints its port");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the cluster on port {port} outlived the demo"
    );
    let folder = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("folder "))
        .expect("the demo prints its folder");
    assert!(!std::path::Path::new(folder).exists(), "{folder} is left");
    let left = processes_in(folder);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// Reads the demo's stdout until `until` returns something, keeping the lines.
fn read_until<T>(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    seen: &mut String,
    mut until: impl FnMut(&str) -> Option<T>,
) -> T {
    for line in lines {
        let line = line.expect("line");
        seen.push_str(&line);
        seen.push('\n');
        if let Some(found) = until(&line) {
            return found;
        }
    }
    panic!("the demo ended before the expected line:\n{seen}")
}

/// Ctrl-C (SIGINT to the demo alone) while the live engine runs under the workload:
/// the demo exits non-zero saying so, and leaves no cluster, no `weir run` and no
/// folder behind — checked at once, before the cluster's watchdog could do it.
#[test]
fn ctrl_c_mid_run_leaves_no_cluster_and_no_weir_run_behind() {
    let mut child: Child = demo_command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir demo");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    let port = read_until(&mut lines, &mut seen, port_of);
    let folder = read_until(&mut lines, &mut seen, |l| {
        l.trim().strip_prefix("folder ").map(str::to_owned)
    });
    let pid = read_until(&mut lines, &mut seen, live_pid_of);
    // One progress line: the workload writes and the engine is live.
    read_until(&mut lines, &mut seen, |l| is_progress_line(l).then_some(()));
    assert!(is_running(pid), "weir run {pid} is live:\n{seen}");
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo ignored SIGINT:\n{seen}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    for line in lines {
        seen.push_str(&line.expect("line"));
        seen.push('\n');
    }
    let stderr = {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut s)
            .expect("stderr");
        s
    };
    assert!(!status.success(), "an interrupted demo exits non-zero");
    assert!(
        stderr.contains("interrupted by SIGINT"),
        "stderr: {stderr}\nstdout: {seen}"
    );
    // Checked at once: the demo itself cleaned up, not the watchdog later.
    assert!(!is_running(pid), "weir run {pid} outlived the demo");
    let left = processes_in(&folder);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(!std::path::Path::new(&folder).exists(), "{folder} is left");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the cluster on port {port} outlived the demo"
    );
}

/// The throwaway cluster is stopped and removed when its owner dies without cleaning
/// up (here: `weir demo` SIGKILLed right after the cluster started).
#[test]
fn a_killed_owner_leaves_no_cluster_behind() {
    let mut child = demo_command()
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn weir demo");
    let stdout = child.stdout.take().expect("stdout");
    let port = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| port_of(&l))
        .expect("the demo prints its port");
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

/// Without a plugin to be found, the demo fails before starting anything, saying how
/// to build one.
#[test]
fn without_the_plugin_the_demo_says_how_to_build_it() {
    let empty = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("demo")
        .env("WEIR_PLUGINS_DIR", empty.path())
        .output()
        .expect("run weir demo");
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("orders-rust.wasm"), "{stderr}");
    assert!(stderr.contains("scripts/build-plugins"), "{stderr}");
    assert!(
        !text(&out.stdout).contains("PostgreSQL listening"),
        "nothing was started"
    );
}
