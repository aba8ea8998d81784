//! The disk cache of compiled plugins, so that a second start does not recompile.
//!
//! An entry is named by the plugin's sha256 and the engine's compatibility hash (which
//! covers the wasmtime version and every compilation setting), and holds the compiled
//! bytes behind a SHA-256 of them. Entries are written to a temporary file and renamed,
//! so a reader never sees half an entry; a damaged, truncated or foreign entry fails
//! its checksum and is compiled again (and replaced), never loaded.

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Tells entries apart from other files and from a future layout.
const MAGIC: &[u8; 8] = b"WEIRCWA1";

/// The wasmtime version Weir was built with, in cache keys and `plugin inspect`.
pub const WASMTIME_VERSION: &str = "48";

/// Why the cache could not be used (never fatal: the plugin is compiled instead).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot write the compiled-plugin cache {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The cache entry of `sha256` for `engine`.
pub fn entry_path(dir: &Path, engine: &Engine, sha256: &[u8; 32]) -> PathBuf {
    // `DefaultHasher::new()` is SipHash with fixed keys: stable within a Rust release,
    // and a change only costs one recompilation.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join(format!(
        "{}-wasmtime{WASMTIME_VERSION}-{:016x}.cwasm",
        hex::encode(sha256),
        h.finish()
    ))
}

/// Loads a cached compilation, or `None` (missing, damaged, or for another engine).
pub fn load(path: &Path, engine: &Engine) -> Option<Component> {
    let bytes = std::fs::read(path).ok()?;
    let compiled = verified(&bytes)?;
    // SAFETY: `Component::deserialize` trusts its input to be wasmtime's own output
    // for a compatible engine. These bytes are: Weir wrote them with
    // `Engine::precompile_component` into its own cache folder, the SHA-256 just
    // checked proves they are unchanged since (a damaged or truncated file is
    // refused above), and wasmtime itself checks the version and settings in the
    // header and refuses a mismatch with an error. The remaining trust is in the
    // cache folder's permissions, as for the `weir` binary beside it.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, compiled) };
    match component {
        Ok(c) => Some(c),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cached plugin compilation refused; compiling again");
            None
        }
    }
}

/// The compiled bytes of an entry whose magic and checksum are right.
fn verified(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    if rest.len() < 32 {
        return None;
    }
    let (digest, compiled) = rest.split_at(32);
    (Sha256::digest(compiled).as_slice() == digest).then_some(compiled)
}

/// Stores a compilation atomically (temporary file, fsync, rename).
pub fn store(path: &Path, compiled: &[u8]) -> Result<(), CacheError> {
    let write_err = |source| CacheError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write_err)?;
    tmp.write_all(MAGIC).map_err(write_err)?;
    tmp.write_all(&Sha256::digest(compiled))
        .map_err(write_err)?;
    tmp.write_all(compiled).map_err(write_err)?;
    tmp.as_file().sync_all().map_err(write_err)?;
    tmp.persist(path).map_err(|e| write_err(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_verifies_only_unchanged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.cwasm");
        store(&path, b"compiled bytes").expect("store");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(verified(&bytes), Some(b"compiled bytes".as_slice()));
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(verified(&damaged), None);
        assert_eq!(verified(&bytes[..bytes.len() - 1]), None);
        assert_eq!(verified(b"WEIRCWA1short"), None);
        assert_eq!(verified(b""), None);
    }
}
