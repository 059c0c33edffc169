//! Reading the logs: plain or gzip (told apart by the gzip magic bytes, not the name, so a
//! rotated `access.log.1` that was compressed reads too; concatenated gzip members, as
//! `cat a.gz b.gz` makes, read as one), or `-` for standard input. Lines come into one buffer
//! the caller reuses: no allocation per line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::bufread::MultiGzDecoder;

use super::error::ReplayError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Large reads: a log is read start to end once.
const BUF: usize = 256 * 1024;

/// One log being read.
pub struct LogReader {
    path: PathBuf,
    inner: Box<dyn BufRead>,
    /// Lines read so far (the number of the line last read, from 1).
    pub line_no: u64,
}

impl LogReader {
    /// Opens `path` (`-`: standard input), uncompressing it when it is gzip.
    pub fn open(path: &Path) -> Result<LogReader, ReplayError> {
        let open_err = |source| ReplayError::Open {
            path: path.to_path_buf(),
            source,
        };
        let raw: Box<dyn Read> = if path == Path::new("-") {
            Box::new(io::stdin().lock())
        } else {
            Box::new(File::open(path).map_err(open_err)?)
        };
        let mut buffered = BufReader::with_capacity(BUF, raw);
        let head = buffered.fill_buf().map_err(open_err)?;
        let inner: Box<dyn BufRead> = if head.starts_with(&GZIP_MAGIC) {
            Box::new(BufReader::with_capacity(BUF, MultiGzDecoder::new(buffered)))
        } else {
            Box::new(buffered)
        };
        Ok(LogReader {
            path: path.to_path_buf(),
            inner,
            line_no: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the next line into `buf` (cleared first, line ending removed). `false` at the end.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> Result<bool, ReplayError> {
        buf.clear();
        let n = self
            .inner
            .read_until(b'\n', buf)
            .map_err(|source| ReplayError::Read {
                path: self.path.clone(),
                line: self.line_no + 1,
                source,
            })?;
        if n == 0 {
            return Ok(false);
        }
        self.line_no += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use flate2::write::GzEncoder;
    use flate2::Compression;

    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        let mut r = LogReader::open(path).unwrap();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while r.next_line(&mut buf).unwrap() {
            out.push(String::from_utf8(buf.clone()).unwrap());
        }
        out
    }

    #[test]
    fn plain_gzip_and_concatenated_gzip_read_alike() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.log");
        std::fs::write(&plain, "a\r\nb\n\nc").unwrap();
        assert_eq!(lines(&plain), ["a", "b", "", "c"]);

        let gz = |text: &str| {
            let mut e = GzEncoder::new(Vec::new(), Compression::fast());
            e.write_all(text.as_bytes()).unwrap();
            e.finish().unwrap()
        };
        // No `.gz` in the name: the magic bytes decide.
        let zipped = dir.path().join("access.log.1");
        let mut bytes = gz("a\nb\n");
        bytes.extend(gz("c\n"));
        std::fs::write(&zipped, bytes).unwrap();
        assert_eq!(lines(&zipped), ["a", "b", "c"]);
    }

    #[test]
    fn a_missing_file_names_itself() {
        let err = LogReader::open(Path::new("/nonexistent/access.log"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/access.log"), "{err}");
    }

    #[test]
    fn corrupt_gzip_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.gz");
        std::fs::write(&bad, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
        let mut r = LogReader::open(&bad).unwrap();
        let err = r.next_line(&mut Vec::new()).err().unwrap();
        assert!(err.to_string().contains("bad.gz"), "{err}");
    }
}
