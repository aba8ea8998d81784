//! `weir plugin new NAME --lang L`: writes a ready plugin project (source, build script,
//! test cases, sample rows, a README, and Weir's SDK and contract vendored), and
//! `weir plugin build [DIR]`: runs a project's build script and checks what it built.
//!
//! The templates are `plugins/templates/` (the common files and one folder per
//! language) and the SDKs of `plugins/`, compiled into the binary, so a project
//! generated anywhere builds with nothing but the toolchain its `build.sh` installs.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// A plugin language `weir plugin new` writes projects for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    Rust,
    Python,
    Js,
    C,
    #[value(name = "cpp")]
    Cpp,
}

/// One file of a project: where it goes, its text, and whether the template's
/// `{{placeholders}}` are filled in (never in vendored SDK files) and it is executable.
struct File {
    path: &'static str,
    text: &'static str,
    template: bool,
    executable: bool,
}

macro_rules! repo {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $path))
    };
}

const fn template(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        template: true,
        executable: false,
    }
}

const fn vendored(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        template: false,
        executable: false,
    }
}

const fn script(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        template: true,
        executable: true,
    }
}

/// The files of every project.
const COMMON: &[File] = &[
    template("README.md", repo!("plugins/templates/common/README.md")),
    template("cases.jsonl", repo!("plugins/templates/common/cases.jsonl")),
    template("rows.jsonl", repo!("plugins/templates/common/rows.jsonl")),
    vendored(
        "wit/transform-0.1.0/log.wit",
        repo!("wit/transform-0.1.0/log.wit"),
    ),
    vendored(
        "wit/transform-0.1.0/transform.wit",
        repo!("wit/transform-0.1.0/transform.wit"),
    ),
    vendored(
        "wit/transform-0.1.0/types.wit",
        repo!("wit/transform-0.1.0/types.wit"),
    ),
    vendored(
        "wit/transform-0.1.0/world.wit",
        repo!("wit/transform-0.1.0/world.wit"),
    ),
    // Contract 0.2, which the templates build on, with its dependency on 0.1's types
    // and log as a copy (the repository's `deps/` is a symbolic link).
    vendored(
        "wit/transform-0.2.0/transform.wit",
        repo!("wit/transform-0.2.0/transform.wit"),
    ),
    vendored(
        "wit/transform-0.2.0/world.wit",
        repo!("wit/transform-0.2.0/world.wit"),
    ),
    vendored(
        "wit/transform-0.2.0/deps/transform-0.1.0/log.wit",
        repo!("wit/transform-0.1.0/log.wit"),
    ),
    vendored(
        "wit/transform-0.2.0/deps/transform-0.1.0/transform.wit",
        repo!("wit/transform-0.1.0/transform.wit"),
    ),
    vendored(
        "wit/transform-0.2.0/deps/transform-0.1.0/types.wit",
        repo!("wit/transform-0.1.0/types.wit"),
    ),
    vendored(
        "wit/transform-0.2.0/deps/transform-0.1.0/world.wit",
        repo!("wit/transform-0.1.0/world.wit"),
    ),
];

const RUST: &[File] = &[
    template("Cargo.toml", repo!("plugins/templates/rust/Cargo.toml")),
    // The plugins' lock file: the project builds with the versions Weir's own plugins
    // are tested with (cargo drops the entries it does not use).
    vendored("Cargo.lock", repo!("plugins/Cargo.lock")),
    template("src/lib.rs", repo!("plugins/templates/rust/src/lib.rs")),
    script("build.sh", repo!("plugins/templates/rust/build.sh")),
    vendored(".gitignore", "/target\n*.wasm\n"),
    vendored(
        "sdk/weir-plugin/Cargo.toml",
        repo!("plugins/templates/rust/sdk-Cargo.toml"),
    ),
    vendored(
        "sdk/weir-plugin/src/lib.rs",
        repo!("plugins/sdk/src/lib.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/alloc.rs",
        repo!("plugins/sdk/src/alloc.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/cases.rs",
        repo!("plugins/sdk/src/cases.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/decimal.rs",
        repo!("plugins/sdk/src/decimal.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/input.rs",
        repo!("plugins/sdk/src/input.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/log.rs",
        repo!("plugins/sdk/src/log.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/output.rs",
        repo!("plugins/sdk/src/output.rs"),
    ),
    vendored(
        "sdk/weir-plugin/src/session.rs",
        repo!("plugins/sdk/src/session.rs"),
    ),
];

const PYTHON: &[File] = &[
    template("app.py", repo!("plugins/templates/python/app.py")),
    template(
        "test_cases.py",
        repo!("plugins/templates/python/test_cases.py"),
    ),
    script("build.sh", repo!("plugins/templates/python/build.sh")),
    vendored(".gitignore", "__pycache__/\n*.wasm\n"),
    vendored(
        "sdk/weir_plugin/__init__.py",
        repo!("plugins/sdk-python/src/weir_plugin/__init__.py"),
    ),
    vendored(
        "sdk/weir_plugin/cases.py",
        repo!("plugins/sdk-python/src/weir_plugin/cases.py"),
    ),
    vendored(
        "sdk/weir_plugin/component.py",
        repo!("plugins/sdk-python/src/weir_plugin/component.py"),
    ),
    vendored(
        "sdk/weir_plugin/decimal.py",
        repo!("plugins/sdk-python/src/weir_plugin/decimal.py"),
    ),
    vendored(
        "sdk/weir_plugin/input.py",
        repo!("plugins/sdk-python/src/weir_plugin/input.py"),
    ),
    vendored(
        "sdk/weir_plugin/log.py",
        repo!("plugins/sdk-python/src/weir_plugin/log.py"),
    ),
    vendored(
        "sdk/weir_plugin/output.py",
        repo!("plugins/sdk-python/src/weir_plugin/output.py"),
    ),
    vendored(
        "sdk/weir_plugin/session.py",
        repo!("plugins/sdk-python/src/weir_plugin/session.py"),
    ),
    vendored(
        "sdk/weir_plugin/types.py",
        repo!("plugins/sdk-python/src/weir_plugin/types.py"),
    ),
    vendored("sdk/README.md", repo!("plugins/sdk-python/README.md")),
];

const JS: &[File] = &[
    template("plugin.js", repo!("plugins/templates/js/plugin.js")),
    template(
        "plugin.test.js",
        repo!("plugins/templates/js/plugin.test.js"),
    ),
    script("build.sh", repo!("plugins/templates/js/build.sh")),
    vendored(".gitignore", "/build\n/node_modules\n*.wasm\n"),
    vendored(
        "package.json",
        "{\n  \"private\": true,\n  \"type\": \"module\",\n  \"scripts\": { \"test\": \"node --test plugin.test.js\" }\n}\n",
    ),
    vendored("sdk/package.json", repo!("plugins/sdk-js/package.json")),
    vendored("sdk/README.md", repo!("plugins/sdk-js/README.md")),
    vendored("sdk/node/bundle.js", repo!("plugins/sdk-js/node/bundle.js")),
    vendored("sdk/node/cases.js", repo!("plugins/sdk-js/node/cases.js")),
    vendored(
        "sdk/node/componentize.js",
        repo!("plugins/sdk-js/node/componentize.js"),
    ),
    vendored("sdk/src/decimal.js", repo!("plugins/sdk-js/src/decimal.js")),
    vendored(
        "sdk/src/describe.js",
        repo!("plugins/sdk-js/src/describe.js"),
    ),
    vendored("sdk/src/errors.js", repo!("plugins/sdk-js/src/errors.js")),
    vendored("sdk/src/index.js", repo!("plugins/sdk-js/src/index.js")),
    vendored("sdk/src/input.js", repo!("plugins/sdk-js/src/input.js")),
    vendored(
        "sdk/src/keep-byte-order-marks.js",
        repo!("plugins/sdk-js/src/keep-byte-order-marks.js"),
    ),
    vendored("sdk/src/log.js", repo!("plugins/sdk-js/src/log.js")),
    vendored("sdk/src/plugin.js", repo!("plugins/sdk-js/src/plugin.js")),
    vendored("sdk/src/row.js", repo!("plugins/sdk-js/src/row.js")),
    vendored("sdk/src/values.js", repo!("plugins/sdk-js/src/values.js")),
];

const C: &[File] = &[
    template("plugin.c", repo!("plugins/templates/c/plugin.c")),
    script("build.sh", repo!("plugins/templates/c/build.sh")),
    vendored(".gitignore", "/build\n*.wasm\n"),
    vendored("sdk/weir_plugin.h", repo!("plugins/sdk-c/weir_plugin.h")),
    vendored(
        "sdk/wasi-tools.sh",
        repo!("plugins/templates/common/wasi-tools.sh"),
    ),
    vendored("sdk/README.md", repo!("plugins/sdk-c/README.md")),
];

const CPP: &[File] = &[
    template("plugin.cpp", repo!("plugins/templates/cpp/plugin.cpp")),
    script("build.sh", repo!("plugins/templates/cpp/build.sh")),
    vendored(".gitignore", "/build\n*.wasm\n"),
    vendored("sdk/weir_plugin.h", repo!("plugins/sdk-c/weir_plugin.h")),
    vendored(
        "sdk/wasi-tools.sh",
        repo!("plugins/templates/common/wasi-tools.sh"),
    ),
    vendored(
        "sdk/weir_plugin.hpp",
        repo!("plugins/sdk-cpp/weir_plugin.hpp"),
    ),
    vendored("sdk/README.md", repo!("plugins/sdk-cpp/README.md")),
];

impl Lang {
    fn files(self) -> &'static [File] {
        match self {
            Lang::Rust => RUST,
            Lang::Python => PYTHON,
            Lang::Js => JS,
            Lang::C => C,
            Lang::Cpp => CPP,
        }
    }

    /// The README's placeholders: (key, text).
    fn readme(self) -> [(&'static str, &'static str); 4] {
        match self {
            Lang::Rust => [
                ("language", "Rust"),
                ("source_files", "`src/lib.rs` and `Cargo.toml`"),
                ("sdk_files", "`sdk/weir-plugin/` and `wit/`"),
                (
                    "language_notes",
                    "`cargo test` runs the cases natively too. The build needs rustup \
                     (it adds the `wasm32-wasip2` target if missing); `Cargo.lock` pins \
                     the versions Weir's own plugins are tested with.",
                ),
            ],
            Lang::Python => [
                ("language", "Python"),
                ("source_files", "`app.py`"),
                (
                    "sdk_files",
                    "`sdk/weir_plugin/` (with its README) and `wit/`",
                ),
                (
                    "language_notes",
                    "`python3 -B test_cases.py` runs the cases natively too. The build needs \
                     python3 with pip; `build.sh` installs componentize-py 0.25.1 on first \
                     use. Import everything at module level: a component has no file system \
                     to import from at run time.",
                ),
            ],
            Lang::Js => [
                ("language", "JavaScript"),
                ("source_files", "`plugin.js`"),
                (
                    "sdk_files",
                    "`sdk/` (`@weir/plugin`, with its README) and `wit/`",
                ),
                (
                    "language_notes",
                    "`node --test plugin.test.js` runs the cases natively too. Integers are \
                     BigInt, decimals exact (`Decimal`), dates `PlainDate`, timestamps \
                     `Timestamp` (BigInt microseconds). The build needs node 20.19+ with npm; \
                     `build.sh` installs ComponentizeJS 0.23.0 on first use, bundles the \
                     plugin with the SDK into one module (a plugin is one module) and builds \
                     it with the SDK's `sdk/node/componentize.js`.",
                ),
            ],
            Lang::C => [
                ("language", "C"),
                ("source_files", "`plugin.c`"),
                (
                    "sdk_files",
                    "`sdk/weir_plugin.h` (with its README: ownership rules) and `wit/`",
                ),
                (
                    "language_notes",
                    "The build needs Debian's clang for wasm32-wasi (`apt-get install clang \
                     lld wasi-libc libclang-rt-dev-wasm32`), cargo (for wit-bindgen-cli) and \
                     node with npm (for jco); `build.sh` installs the last two, pinned, on \
                     first use. `sdk/README.md` says who allocates and who frees what.",
                ),
            ],
            Lang::Cpp => [
                ("language", "C++"),
                ("source_files", "`plugin.cpp`"),
                (
                    "sdk_files",
                    "`sdk/weir_plugin.hpp` (C++20, with its README) over the C helper \
                     `sdk/weir_plugin.h`, and `wit/`",
                ),
                (
                    "language_notes",
                    "The build needs Debian's clang and clang++ for wasm32-wasi (`apt-get \
                     install clang lld wasi-libc libclang-rt-dev-wasm32 libc++-dev-wasm32 \
                     libc++abi-14-dev-wasm32`), cargo (for wit-bindgen-cli) and node with \
                     npm (for jco); `build.sh` installs the last two, pinned, on first use. \
                     The plugin is compiled without exceptions (`-fno-exceptions`): failures \
                     are values (`weir::Result`, `WEIR_TRY`). `sdk/README.md` describes the \
                     API.",
                ),
            ],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
            Lang::Cpp => "cpp",
        }
    }
}

/// Whether `name` can name a plugin, its package and its component file in every
/// language: lower-case ASCII letters, digits and `-`, starting with a letter.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !ok {
        return Err(super::usage(format!(
            "plugin name `{name}`: use lower-case letters, digits and `-`, starting with a \
             letter and at most 64 characters (e.g. pii-mask)"
        )));
    }
    Ok(())
}

/// `weir plugin new NAME --lang L [--dir DIR]`.
pub(crate) fn new(name: &str, lang: Lang, dir: Option<PathBuf>) -> anyhow::Result<()> {
    check_name(name)?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() && std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_some()) {
        anyhow::bail!(
            "{} exists and is not empty: choose another --dir, or remove it",
            dir.display()
        );
    }
    let crate_name = name.replace('-', "_");
    let mut values = vec![
        ("name", name),
        ("lang", lang.name()),
        ("crate", &crate_name),
    ];
    values.extend(lang.readme());
    for file in COMMON.iter().chain(lang.files()) {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("create {}", parent.display()))?;
        }
        let text = if file.template {
            fill(file.text, &values)
        } else {
            file.text.to_owned()
        };
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("make {} executable", path.display()))?;
        }
    }
    let mut out = std::io::stdout();
    writeln!(
        out,
        "wrote {} ({} plugin `{name}`); next:\n  weir plugin build {}\n  weir plugin test {}/{name}.wasm --cases {}/cases.jsonl",
        dir.display(),
        lang.name(),
        dir.display(),
        dir.display(),
        dir.display()
    )?;
    Ok(())
}

/// The template's text with each `{{key}}` replaced by its value.
fn fill(text: &str, values: &[(&str, &str)]) -> String {
    let mut out = text.to_owned();
    for (key, value) in values {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

/// `weir plugin build [DIR]`: runs `DIR/build.sh`, whose last line of output is the
/// component it wrote, then loads the component as the engine would and prints what it
/// declares.
pub(crate) async fn build(dir: &Path) -> anyhow::Result<()> {
    let script = dir.join("build.sh");
    if !script.is_file() {
        anyhow::bail!(
            "{} has no build.sh: run `weir plugin build` in a project `weir plugin new` wrote, or give its folder",
            dir.display()
        );
    }
    // Its progress and errors go to the terminal as they come; only stdout (whose
    // last line names the component) is read. (tokio's `output()` would capture
    // stderr whatever it was set to, and the errors were never shown.)
    let out = tokio::process::Command::new("sh")
        .arg("build.sh")
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("run {}", script.display()))?
        .wait_with_output()
        .await
        .with_context(|| format!("run {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!(
            "{} failed ({}): its output is above",
            script.display(),
            out.status
        );
    }
    let Some(wasm) = stdout.lines().rev().find(|l| !l.trim().is_empty()) else {
        anyhow::bail!(
            "{} printed no component path (its last line must be the .wasm it wrote)",
            script.display()
        );
    };
    let wasm = dir.join(wasm.trim());
    let host = weir::plugin::PluginHost::new(weir::plugin::PluginHost::default_cache_dir());
    let limits = weir::plugin::SandboxLimits::default();
    let loaded = {
        let wasm = wasm.clone();
        tokio::task::spawn_blocking(move || host.load(&wasm, &limits))
            .await
            .context("the plugin task stopped unexpectedly")?
    }
    // A component that does not load is a failed build (exit 1), not a configuration
    // error: the error is passed on as text.
    .map_err(|e| {
        anyhow::anyhow!(
            "load the component {} build.sh wrote: {}",
            wasm.display(),
            weir::errors::error_chain(&e)
        )
    })?;
    let d = loaded.description();
    writeln!(
        std::io::stdout().lock(),
        "built {}: plugin `{}` {}, {} columns, sha256 {}, {} bytes",
        wasm.display(),
        d.name,
        d.version,
        d.columns.len(),
        loaded.sha256_hex(),
        loaded.size_bytes()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tool versions a generated build.sh pins are the ones Weir's own plugins
    /// are built and tested with.
    #[test]
    fn generated_builds_pin_the_tools_weirs_plugins_are_built_with() {
        let jco = repo!("plugins/tools/package.json")
            .lines()
            .find_map(|l| l.trim().strip_prefix("\"@bytecodealliance/jco\": \""))
            .and_then(|v| v.split('"').next())
            .expect("jco in package.json");
        let wit_bindgen = repo!("scripts/install-plugin-tools")
            .lines()
            .find_map(|l| l.strip_prefix("wit_bindgen_version="))
            .expect("wit-bindgen in install-plugin-tools");
        let componentize_py = repo!("plugins/tools/requirements.txt")
            .lines()
            .find_map(|l| l.strip_prefix("componentize-py=="))
            .expect("componentize-py in requirements.txt");
        assert!(
            repo!("plugins/templates/python/build.sh")
                .contains(&format!("\ncomponentize_py_version={componentize_py}\n")),
            "componentize-py {componentize_py}"
        );
        let componentize_js = repo!("plugins/tools/package.json")
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("\"@bytecodealliance/componentize-js\": \"")
            })
            .and_then(|v| v.split('"').next())
            .expect("componentize-js in package.json");
        assert!(
            repo!("plugins/templates/js/build.sh")
                .contains(&format!("\ncomponentize_js_version={componentize_js}\n")),
            "componentize-js {componentize_js}"
        );
        assert!(
            repo!("plugins/sdk-js/node/componentize.js").contains(&format!(
                "\nexport const COMPONENTIZE_JS_VERSION = '{componentize_js}';\n"
            )),
            "the bindings weir-plugin-componentize patches are ComponentizeJS {componentize_js}'s"
        );
        let tools = repo!("plugins/templates/common/wasi-tools.sh");
        assert!(
            tools.contains(&format!("\njco_version={jco}\n")),
            "jco {jco}"
        );
        assert!(
            tools.contains(&format!("\nwit_bindgen_version={wit_bindgen}\n")),
            "wit-bindgen {wit_bindgen}"
        );
    }

    #[test]
    fn names_are_checked_and_placeholders_filled() {
        for good in ["pii-mask", "a", "orders2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Pii", "2x", "a_b", "a-", "a b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(
            fill(
                "{{name}} is {{crate}}; {{other}}",
                &[("name", "a-b"), ("crate", "a_b")]
            ),
            "a-b is a_b; {{other}}"
        );
    }
}
