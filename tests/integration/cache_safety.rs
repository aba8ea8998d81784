//! The compiled-plugin cache cannot be swapped, files with data are private,
//! `plugin test` limit flags are range-checked, and `WEIR_WASM_PERFMAP` names plugin
//! functions for `perf` (through the `weir` binary).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use serde_json::Value as J;

use crate::harness::text;
use crate::plugins::plugin;

/// `weir plugin inspect --json WASM` with the given cache folder: (exit code, the JSON
/// or Null, stderr).
fn inspect(wasm: &Path, cache: &Path) -> (Option<i32>, J, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "inspect", "--json"])
        .arg(wasm)
        .env("WEIR_PLUGIN_CACHE", cache)
        .output()
        .expect("run weir plugin inspect");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(J::Null);
    (out.status.code(), json, text(&out.stderr))
}

fn cache_entries(cache: &Path) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(cache)
        .expect("read the cache folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    entries
}

#[test]
fn a_cache_entry_copied_to_another_plugins_name_is_detected_and_recompiled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let (orders, totals) = (plugin("orders-rust"), plugin("daily-totals-rust"));

    let (code, first, stderr) = inspect(&orders, &cache);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(first["compile"]["cache_hit"], false);
    assert_eq!(
        std::fs::metadata(&cache)
            .expect("cache")
            .permissions()
            .mode()
            & 0o777,
        0o700,
        "a new cache folder is private"
    );
    let orders_entry = cache_entries(&cache).pop().expect("the orders entry");
    let (code, again, _) = inspect(&orders, &cache);
    assert_eq!(
        (code, &again["compile"]["cache_hit"]),
        (Some(0), &J::Bool(true))
    );

    let (code, t, _) = inspect(&totals, &cache);
    assert_eq!(
        (code, &t["compile"]["cache_hit"]),
        (Some(0), &J::Bool(false))
    );
    let totals_entry = cache_entries(&cache)
        .into_iter()
        .find(|p| *p != orders_entry)
        .expect("the daily-totals entry");

    // Another plugin's compiled code under daily-totals' name: never loaded.
    std::fs::copy(&orders_entry, &totals_entry).expect("swap the entry");
    let (code, swapped, stderr) = inspect(&totals, &cache);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        swapped["name"], t["name"],
        "the plugin described is daily-totals"
    );
    assert_eq!(
        swapped["compile"]["cache_hit"], false,
        "the swapped entry was loaded: {swapped}"
    );
    assert!(stderr.contains("failed its authentication"), "{stderr}");
    // Recompiled and stored again: the next start is a hit, of the right plugin.
    let (_, healed, _) = inspect(&totals, &cache);
    assert_eq!(healed["compile"]["cache_hit"], true);
    assert_eq!(healed["name"], t["name"]);
}

#[test]
fn a_cache_folder_others_can_write_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    let (code, _, stderr) = inspect(&plugin("orders-rust"), &cache);
    assert_eq!(code, Some(2), "a configuration error: {stderr}");
    assert!(
        stderr.contains("writable by its group") && stderr.contains("chmod go-w"),
        "{stderr}"
    );
    assert!(cache_entries(&cache).is_empty(), "nothing was cached there");
}

#[test]
fn plugin_test_limit_flags_out_of_range_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, "").expect("rows");
    for (flag, value) in [
        ("--memory-mb", "18014398509481984"),
        ("--memory-mb", "0"),
        ("--fuel-per-call", "5"),
        ("--timeout-ms", "0"),
        ("--max-stack-kb", "18014398509481984"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["plugin", "test"])
            .arg(plugin("orders-rust"))
            .arg("--input")
            .arg(&rows)
            .args(["--partition", "2026-03-01", flag, value])
            .env("WEIR_PLUGIN_CACHE", dir.path().join("cache"))
            .output()
            .expect("run weir plugin test");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("is not in"),
            "{flag} {value}: {stderr}"
        );
    }
    // `-c` / `--config` (Weir's config file) where a plugin setting (`-C`) was meant:
    // refused with the flag to use, never taken as a file and ignored.
    for flag in ["-c", "--config"] {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["plugin", "test"])
            .arg(plugin("orders-rust"))
            .arg("--input")
            .arg(&rows)
            .args(["--partition", "2026-03-01", flag, "rate=1.5"])
            .env("WEIR_PLUGIN_CACHE", dir.path().join("cache"))
            .output()
            .expect("run weir plugin test");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains("`-C KEY=VALUE`"), "{flag}: {stderr}");
    }
}

/// `WEIR_WASM_PERFMAP` set: wasmtime writes `/tmp/perf-<pid>.map`, naming the plugin's
/// own functions (a compile and a load from the cache alike); unset, it writes none.
#[test]
fn weir_wasm_perfmap_names_a_plugins_functions_for_perf() {
    let wasm = plugin("orders-rust");
    let cache = tempfile::tempdir().expect("tempdir");
    let run = |perfmap: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(["plugin", "inspect", "--json"])
            .arg(&wasm)
            .env("WEIR_PLUGIN_CACHE", cache.path())
            .env_remove("WEIR_WASM_PERFMAP")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if perfmap {
            cmd.env("WEIR_WASM_PERFMAP", "1");
        }
        let child = cmd.spawn().expect("run weir plugin inspect");
        let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
        let out = child.wait_with_output().expect("wait for weir");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let text = std::fs::read_to_string(&map).ok();
        let _ = std::fs::remove_file(&map);
        text
    };
    // Compiled, then loaded from the cache.
    for _ in 0..2 {
        let map = run(true).expect("a perf map with WEIR_WASM_PERFMAP set");
        assert!(
            map.lines().any(|l| l.contains("weir_plugin")),
            "the SDK's functions are named: {}",
            map.lines().take(5).collect::<Vec<_>>().join("\n")
        );
    }
    assert_eq!(run(false), None, "no perf map without WEIR_WASM_PERFMAP");
}
