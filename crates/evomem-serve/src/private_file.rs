//! Files that only the service's user may read (mode 0600 on Unix), written
//! atomically: the keys file is replaced by writing a temporary file in the
//! same folder, fsyncing it, renaming it over the old one and fsyncing the
//! folder, so that a crash leaves either the old file or the new one, never
//! a half-written one, and a reader never sees a partial file.

use std::io::Write;
use std::path::Path;

/// Replace `path` with `bytes` atomically, mode 0600 (module docs).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_string());
    let mut suffix = [0u8; 6];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut suffix);
    let tmp = dir.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
    let result = (|| {
        let mut f = create_private(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        sync_dir(&dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Create `path` (which must not exist) readable and writable by its owner
/// only.
pub fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Fsync a folder, so that a rename in it is durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// The permission bits of `path` (Unix; `None` elsewhere).
pub fn mode(path: &Path) -> std::io::Result<Option<u32>> {
    let md = std::fs::metadata(path)?;
    #[cfg(unix)]
    {
        Ok(Some(
            std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = md;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_are_private_and_replace_the_old_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.toml");
        std::fs::write(&p, "old").unwrap();
        #[cfg(unix)]
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        write_atomically(&p, b"new contents").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new contents");
        #[cfg(unix)]
        assert_eq!(mode(&p).unwrap(), Some(0o600));
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("keys.toml")]);
    }
}
