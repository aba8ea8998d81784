//! The disk cache of compiled plugins, so that a second start does not recompile.
//!
//! A compiled component is machine code that wasmtime loads without checking it
//! (`Component::deserialize` is `unsafe`): whoever can change a cache entry can run
//! code in the engine. So the cache is guarded three ways:
//!
//! * **The folder is private.** It is created `0700`; an existing folder must be owned
//!   by the user running Weir and not writable by group or others, or it is refused
//!   with the fix ([`CacheDir::open`]). A cache shared between users is not a cache.
//! * **Every entry is authenticated.** It holds an HMAC-SHA-256, under a random key
//!   kept in the folder (`key`, `0600`), of the plugin's sha256, the engine's
//!   compatibility hash and the compiled bytes. A damaged, truncated, foreign or
//!   forged entry fails it.
//! * **An entry is bound to its name.** The plugin's sha256 and the engine's hash are
//!   inside the authenticated content, and are compared with the ones the entry is
//!   looked up for, so an entry copied or renamed to another plugin's name is detected.
//!
//! A bad entry is removed and the plugin compiled again (and stored), never loaded.
//! Entries are written to a temporary file and renamed, so a reader never sees half of
//! one.

use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Tells entries apart from other files and from other layouts (`WEIRCWA1` entries,
/// with an unkeyed checksum, are refused and replaced).
const MAGIC: &[u8; 8] = b"WEIRCWA2";

/// The file holding the folder's HMAC key.
const KEY_FILE: &str = "key";
const KEY_BYTES: usize = 32;

/// The wasmtime version Weir was built with, in cache keys and `plugin inspect`.
pub const WASMTIME_VERSION: &str = "48";

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot write the compiled-plugin cache {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot use the compiled-plugin cache folder {path}")]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The folder (or its key) could be changed by someone else: compiled code loaded
    /// from it would not be Weir's own.
    #[error(
        "the compiled-plugin cache {path} {problem}, so its compiled code could be swapped by another user; {fix}, or point WEIR_PLUGIN_CACHE at a private folder"
    )]
    Unsafe {
        path: PathBuf,
        problem: String,
        fix: String,
    },
}

/// An opened, checked cache folder and its key.
pub struct CacheDir {
    dir: PathBuf,
    key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for CacheDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CacheDir")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CacheDir {
    /// Opens `dir` (creating it `0700` if missing), checks that only this user can
    /// change it, and reads its key (creating it if missing).
    pub fn open(dir: &Path) -> Result<CacheDir, CacheError> {
        let folder_err = |source| CacheError::Folder {
            path: dir.to_owned(),
            source,
        };
        crate::private::create_dir(dir).map_err(folder_err)?;
        check_private(dir, true)?;
        let key_path = dir.join(KEY_FILE);
        let key = match read_key(&key_path) {
            Ok(key) => key,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_key(dir, &key_path).map_err(folder_err)?
            }
            Err(e) => return Err(folder_err(e)),
        };
        check_private(&key_path, false)?;
        Ok(CacheDir {
            dir: dir.to_owned(),
            key,
        })
    }

    /// The entry of the plugin `sha256` for `engine`.
    pub fn entry(&self, engine: &Engine, sha256: &[u8; 32]) -> Entry {
        let compat = compat_hash(engine);
        Entry {
            path: self.dir.join(format!(
                "{}-wasmtime{WASMTIME_VERSION}-{compat:016x}.cwasm",
                hex::encode(sha256)
            )),
            binding: binding(sha256, compat),
            key: self.key,
        }
    }
}

/// One entry: where it is, and what its content must be bound to.
pub struct Entry {
    path: PathBuf,
    /// The plugin's sha256, the wasmtime version and the engine's compatibility hash.
    binding: Vec<u8>,
    key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Entry {
    #[cfg(test)]
    fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the cached compilation, or `None` (missing, or refused: then removed, so
    /// the caller's compilation replaces it).
    pub fn load(&self, engine: &Engine) -> Option<Component> {
        let bytes = std::fs::read(&self.path).ok()?;
        let Some(compiled) = self.verified(&bytes) else {
            tracing::warn!(path = %self.path.display(), "cached plugin compilation failed its authentication; removed, compiling again");
            self.remove();
            return None;
        };
        // SAFETY: `Component::deserialize` trusts its input to be wasmtime's own output
        // for a compatible engine. These bytes are: the HMAC just checked, under a key
        // only this user can read, proves Weir wrote them with
        // `Engine::precompile_component` for this very plugin (its sha256 is inside
        // the authenticated content) and this engine's compatibility hash, in a folder
        // only this user can change (`CacheDir::open`); wasmtime itself also checks the
        // version and settings in the header and refuses a mismatch with an error.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, compiled) };
        match component {
            Ok(c) => Some(c),
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "cached plugin compilation refused; removed, compiling again");
                self.remove();
                None
            }
        }
    }

    /// The compiled bytes of an entry whose magic and tag are right for this entry.
    fn verified<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        let rest = bytes.strip_prefix(MAGIC.as_slice())?;
        if rest.len() < 32 {
            return None;
        }
        let (tag, compiled) = rest.split_at(32);
        // Not a secret comparison in practice (the key never leaves the folder), but a
        // constant-time one costs nothing here.
        let expected = self.tag(compiled);
        let diff = tag
            .iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        (diff == 0).then_some(compiled)
    }

    fn tag(&self, compiled: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.key, &[&self.binding, compiled])
    }

    fn remove(&self) {
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot remove a refused cache entry");
        }
    }

    /// Stores a compilation atomically (temporary file, fsync, rename), `0600`.
    pub fn store(&self, compiled: &[u8]) -> Result<(), CacheError> {
        let write_err = |source| CacheError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        // `NamedTempFile` creates its file 0600.
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write_err)?;
        tmp.write_all(MAGIC).map_err(write_err)?;
        tmp.write_all(&self.tag(compiled)).map_err(write_err)?;
        tmp.write_all(compiled).map_err(write_err)?;
        tmp.as_file().sync_all().map_err(write_err)?;
        tmp.persist(&self.path).map_err(|e| write_err(e.error))?;
        Ok(())
    }
}

/// The engine's compatibility hash (wasmtime version and every compilation setting)
/// as a number. `DefaultHasher::new()` is SipHash with fixed keys: stable within a
/// Rust release, and a change only costs one recompilation.
fn compat_hash(engine: &Engine) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    h.finish()
}

/// What an entry's content is bound to.
fn binding(sha256: &[u8; 32], compat: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(32 + 8 + WASMTIME_VERSION.len());
    b.extend_from_slice(sha256);
    b.extend_from_slice(&compat.to_be_bytes());
    b.extend_from_slice(WASMTIME_VERSION.as_bytes());
    b
}

/// HMAC-SHA-256 (RFC 2104) of the concatenated `parts`, with a key of at most one
/// block.
fn hmac_sha256(key: &[u8; KEY_BYTES], parts: &[&[u8]]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut padded = [0u8; BLOCK];
    padded[..KEY_BYTES].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(padded.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(padded.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Refuses `path` unless only this user can change it (and, for a file, read it).
fn check_private(path: &Path, is_dir: bool) -> Result<(), CacheError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::symlink_metadata(path).map_err(|source| CacheError::Folder {
            path: path.to_owned(),
            source,
        })?;
        let unsafe_err = |problem: String, fix: String| CacheError::Unsafe {
            path: path.to_owned(),
            problem,
            fix,
        };
        if meta.file_type().is_symlink() {
            return Err(unsafe_err(
                "is a symbolic link".into(),
                format!(
                    "replace it with a real {}",
                    if is_dir { "folder" } else { "file" }
                ),
            ));
        }
        if let Some(me) = effective_uid()
            && meta.uid() != me
        {
            return Err(unsafe_err(
                format!(
                    "is owned by uid {}, not by this user (uid {me})",
                    meta.uid()
                ),
                format!("run `chown {me} {}`", path.display()),
            ));
        }
        let mode = meta.mode() & 0o777;
        // A folder: no one else may write. The key: no one else may even read.
        let forbidden = if is_dir { 0o022 } else { 0o077 };
        if mode & forbidden != 0 {
            let who = match (mode & forbidden & 0o070 != 0, mode & forbidden & 0o007 != 0) {
                (true, true) => "group and others",
                (true, false) => "its group",
                _ => "others",
            };
            let access = if is_dir {
                "writable"
            } else {
                "readable or writable"
            };
            return Err(unsafe_err(
                format!("is {access} by {who} (mode {mode:03o})"),
                format!(
                    "run `chmod {} {}`",
                    if is_dir { "go-w" } else { "600" },
                    path.display()
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, is_dir);
    Ok(())
}

/// The effective uid of this process: the owner of `/proc/self` (Linux); `None`
/// where that is not known (then ownership is not checked, only the mode).
#[cfg(unix)]
fn effective_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

fn read_key(path: &Path) -> std::io::Result<[u8; KEY_BYTES]> {
    let mut key = [0u8; KEY_BYTES];
    let mut file = std::fs::File::open(path)?;
    file.read_exact(&mut key)?;
    Ok(key)
}

/// Creates the folder's key from the operating system's random source, `0600`; if
/// another process created one meanwhile, that one is used.
fn create_key(dir: &Path, path: &Path) -> std::io::Result<[u8; KEY_BYTES]> {
    let mut key = [0u8; KEY_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&key)?;
    tmp.as_file().sync_all()?;
    match tmp.persist_noclobber(path) {
        Ok(_) => Ok(key),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(e) => Err(e.error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        Engine::new(&config).expect("engine")
    }

    #[test]
    fn an_entry_verifies_only_unchanged_and_only_under_its_own_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = CacheDir::open(&dir.path().join("cache")).expect("open");
        let engine = engine();
        let a = cache.entry(&engine, &[1; 32]);
        let b = cache.entry(&engine, &[2; 32]);
        a.store(b"compiled bytes").expect("store");
        let bytes = std::fs::read(a.path()).expect("read");
        assert_eq!(a.verified(&bytes), Some(b"compiled bytes".as_slice()));

        // Damaged or truncated: refused.
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(a.verified(&damaged), None);
        assert_eq!(a.verified(&bytes[..bytes.len() - 1]), None);
        assert_eq!(a.verified(b"WEIRCWA2short"), None);
        assert_eq!(a.verified(b""), None);

        // The same bytes under another plugin's name: refused.
        assert_eq!(b.verified(&bytes), None);

        // An entry with a checksum anyone could compute (the old unkeyed layout, or a
        // forgery without the key): refused.
        let mut forged = b"WEIRCWA2".to_vec();
        forged.extend_from_slice(&Sha256::digest(b"evil code"));
        forged.extend_from_slice(b"evil code");
        assert_eq!(a.verified(&forged), None);

        // Another folder's key: refused.
        let other = CacheDir::open(&dir.path().join("other")).expect("open");
        assert_eq!(other.entry(&engine, &[1; 32]).verified(&bytes), None);
    }

    #[test]
    fn a_refused_entry_is_removed_not_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = CacheDir::open(dir.path()).expect("open");
        let engine = engine();
        let a = cache.entry(&engine, &[1; 32]);
        let b = cache.entry(&engine, &[2; 32]);
        a.store(b"compiled bytes").expect("store");
        std::fs::copy(a.path(), b.path()).expect("copy");
        assert!(b.load(&engine).is_none());
        assert!(!b.path().exists(), "a swapped entry must be removed");
        assert!(a.path().exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_or_key_others_can_change_is_refused_and_new_ones_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("a").join("cache");
        CacheDir::open(&cache).expect("open");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&cache), 0o700);
        assert_eq!(mode(&cache.join(KEY_FILE)), 0o600);

        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o770)).expect("chmod");
        let err = CacheDir::open(&cache)
            .expect_err("group-writable")
            .to_string();
        assert!(err.contains("writable by its group"), "{err}");
        assert!(err.contains("chmod go-w"), "{err}");
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o757)).expect("chmod");
        let err = CacheDir::open(&cache)
            .expect_err("world-writable")
            .to_string();
        assert!(err.contains("writable by others"), "{err}");
        // Readable by others is fine for the folder (the key is not).
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        CacheDir::open(&cache).expect("0755 folder");
        std::fs::set_permissions(cache.join(KEY_FILE), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let err = CacheDir::open(&cache)
            .expect_err("readable key")
            .to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }
}
