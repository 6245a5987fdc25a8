//! Reading a file a user named, with a cap on its size: a wrong path (`/dev/zero`, a log,
//! a disk image) must cost one line, not the machine's memory.

use std::io::{self, Read};
use std::path::Path;

/// The bytes of `path`, if it holds at most `cap` of them.
///
/// # Errors
/// The file cannot be opened or read, or it is larger than `cap` (`InvalidData`, with a
/// message saying so: "larger than 64 KiB").
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {}", size(cap)),
        ));
    }
    Ok(bytes)
}

/// As [`read_capped`], as UTF-8 text.
///
/// # Errors
/// As [`read_capped`], or the bytes are not UTF-8 (`InvalidData`).
pub fn read_text_capped(path: &Path, cap: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, cap)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text".to_string()))
}

/// `cap` in the largest binary unit it is a whole number of.
fn size(cap: u64) -> String {
    match cap {
        c if c >= 1 << 30 && c % (1 << 30) == 0 => format!("{} GiB", c >> 30),
        c if c >= 1 << 20 && c % (1 << 20) == 0 => format!("{} MiB", c >> 20),
        c if c >= 1 << 10 && c % (1 << 10) == 0 => format!("{} KiB", c >> 10),
        c => format!("{c} bytes"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_after_the_cap() {
        let e = read_capped(Path::new("/dev/zero"), 64 << 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "larger than 64 KiB");
    }

    #[test]
    fn a_file_up_to_the_cap_is_read_whole() {
        let dir = std::env::temp_dir().join(format!("crest-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"hello").unwrap();
        assert_eq!(read_capped(&path, 5).unwrap(), b"hello");
        assert_eq!(
            read_capped(&path, 4).unwrap_err().to_string(),
            "larger than 4 bytes"
        );
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_text_capped(&path, 10).unwrap_err().to_string(),
            "not UTF-8 text"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
