//! Files and folders that hold row data or compiled code, created private to the user
//! running Weir: the stage folder, checkpoint exports and the compiled-plugin cache.
//!
//! Row data is often personal data; a stage created with the default `umask` (0755
//! folders, 0644 files) lets every local user read it. Folders are created `0700` and
//! files `0600`; what already exists is left as it is (the user chose it).

use std::fs::File;
use std::path::Path;

/// Creates `dir` and its missing parents, `0700`. An existing folder is unchanged.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Creates (or truncates) the file `path` for writing, `0600` if it is new.
pub fn create_file(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options.open(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
    }

    #[test]
    fn new_folders_and_files_are_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nested = dir.path().join("a").join("b");
        create_dir(&nested).expect("mkdir");
        assert_eq!(mode(&nested), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        let file = nested.join("f");
        create_file(&file).expect("create");
        assert_eq!(mode(&file), 0o600);
    }
}
