//! A trace file's bytes: plain, or zstd-compressed (told by the frame's magic number, not
//! the name; frames one after another read as one stream, as `zstd` and `cat a.zst b.zst`
//! make them). Memory stays bounded: a 1 MiB read buffer, and zstd's window (at most
//! [`MAX_WINDOW`]).

use ruzstd::decoding::{FrameDecoder, StreamingDecoder};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The largest zstd window accepted (zstd's own default limit for decoding, 128 MiB).
pub const MAX_WINDOW: u64 = 128 << 20;
const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Opens `path` for reading line by line.
///
/// # Errors
/// One line naming the file and why it cannot be read.
pub fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let head = r
        .fill_buf()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if head.starts_with(&MAGIC) {
        Ok(Box::new(BufReader::with_capacity(1 << 20, Zstd::new(r))))
    } else {
        Ok(Box::new(r))
    }
}

/// zstd frames one after another, decoded as one stream.
pub struct Zstd<R: Read> {
    frame: Option<StreamingDecoder<R, FrameDecoder>>,
    source: Option<R>,
}

impl<R: BufRead> Zstd<R> {
    /// Decodes `source`.
    pub fn new(source: R) -> Self {
        Self {
            frame: None,
            source: Some(source),
        }
    }
}

fn invalid(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

impl<R: BufRead> Read for Zstd<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(f) = &mut self.frame {
                let n = f.read(buf).map_err(|e| {
                    invalid(format!("the zstd stream is cut short or damaged: {e}"))
                })?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                if !f.decoder.is_finished() {
                    return Err(invalid(
                        "the zstd stream is cut short or damaged: it ends inside a frame".into(),
                    ));
                }
                // This frame is over; another may follow.
                let Some(f) = self.frame.take() else {
                    return Ok(0);
                };
                self.source = Some(f.into_inner());
            }
            let Some(mut src) = self.source.take() else {
                return Ok(0);
            };
            if src.fill_buf()?.is_empty() {
                return Ok(0);
            }
            let mut d = FrameDecoder::new();
            d.set_max_window_size(MAX_WINDOW);
            let f = StreamingDecoder::new_with_decoder(src, d)
                .map_err(|e| invalid(format!("not a zstd frame: {e}")))?;
            self.frame = Some(f);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ruzstd::encoding::{CompressionLevel, compress_to_vec};

    fn unzstd(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Zstd::new(bytes).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn frames_one_after_another_read_as_one_stream_and_a_cut_one_fails() {
        let a = compress_to_vec(&b"0,a,1,1,1,get,0\n"[..], CompressionLevel::Fastest);
        let b = compress_to_vec(&b"1,b,1,1,1,get,0\n"[..], CompressionLevel::Fastest);
        let both = [a.clone(), b].concat();
        assert_eq!(
            unzstd(&both).unwrap(),
            b"0,a,1,1,1,get,0\n1,b,1,1,1,get,0\n"
        );
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("{i},k{i},3,10,1,get,0\n").into_bytes())
            .collect();
        let z = compress_to_vec(&big[..], CompressionLevel::Fastest);
        assert_eq!(unzstd(&z).unwrap(), big);
        let e = unzstd(&z[..z.len() / 2]).unwrap_err();
        assert!(e.to_string().contains("cut short or damaged"), "{e}");
    }

    #[test]
    fn open_tells_zstd_by_its_magic_number() {
        let dir = std::env::temp_dir().join(format!("crest-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("t.csv");
        let packed = dir.join("t.bin");
        std::fs::write(&plain, b"0,a,1,1,1,get,0\n").unwrap();
        std::fs::write(
            &packed,
            compress_to_vec(&b"0,a,1,1,1,get,0\n"[..], CompressionLevel::Fastest),
        )
        .unwrap();
        for p in [&plain, &packed] {
            let mut s = String::new();
            open(p).unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s, "0,a,1,1,1,get,0\n");
        }
        let e = open(&dir.join("missing")).err().unwrap();
        assert!(e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
