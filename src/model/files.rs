//! The small text files of a model folder (`tokenizer.json`, `tokenizer_config.json`,
//! `generation_config.json`, `config.json`, `chat_template.jinja`) read with a size cap: a folder
//! comes from anyone, and a file named like a config can be a device, a FIFO or gigabytes.
//!
//! [`read_text`] reads at most `cap + 1` bytes whatever the file claims to be, so a file past its
//! cap is refused without being read in full.

use std::io::Read;
use std::path::Path;

/// Largest `tokenizer.json` read (Qwen3.5's is about 12 MiB; the largest published ones about
/// 35 MiB).
pub const MAX_TOKENIZER_JSON_BYTES: u64 = 256 << 20;
/// Largest JSON config read (`tokenizer_config.json`, `generation_config.json`, `config.json`).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;
/// Largest `chat_template.jinja` read (published templates are under 32 KiB).
pub const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

/// The file's text; `None` when it does not exist. A file over `cap` bytes, a directory or text
/// that is not UTF-8 is an error of kind `InvalidData` naming the file and the cap.
pub fn read_text(path: &Path, cap: u64) -> std::io::Result<Option<String>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    if file.metadata()?.is_dir() {
        return Err(invalid(format!("{} is a directory", path.display())));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(invalid(format!("{} is larger than {cap} bytes", path.display())));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| invalid(format!("{} is not UTF-8", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_its_cap_is_refused_without_reading_it_all() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.json");
        std::fs::write(&p, "x".repeat(11)).unwrap();
        assert_eq!(read_text(&p, 11).unwrap().as_deref(), Some("xxxxxxxxxxx"));
        let e = read_text(&p, 10).unwrap_err();
        assert!(e.to_string().contains("larger than 10 bytes"), "{e}");
        // /dev/zero never ends: only cap + 1 bytes of it are read.
        let e = read_text(Path::new("/dev/zero"), 1 << 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(read_text(&dir.path().join("absent"), 10).unwrap().is_none());
        assert!(read_text(dir.path(), 10).is_err());
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_text(&p, 10).unwrap_err().to_string().contains("not UTF-8"));
    }
}
