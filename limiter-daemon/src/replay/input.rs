//! Reading the logs: plain or gzip (told apart by the gzip magic bytes, not the name, so a
//! rotated `access.log.1` that was compressed reads too; concatenated gzip members, as
//! `cat a.gz b.gz` makes, read as one), or `-` for standard input. Lines come into one buffer
//! the caller reuses: no allocation per line.
//!
//! A line is at most [`MAX_LINE`] bytes. A longer one is read through and dropped without
//! being held (the buffer never grows past the cap), and reported as too long: one 2 GB line
//! used to cost 3 GB of memory.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::bufread::MultiGzDecoder;

use super::error::ReplayError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Large reads: a log is read start to end once.
const BUF: usize = 256 * 1024;
/// The longest line replayed, its line ending left out: 1 MiB, far past any request head nginx
/// or Apache accept by default (32 KB and 8 KB a field), even escaped as `\xHH`.
pub const MAX_LINE: usize = 1 << 20;

/// What [`LogReader::next_line`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextLine {
    /// A line, in the buffer.
    Line,
    /// A line longer than [`MAX_LINE`], read through and dropped (the buffer is empty).
    TooLong,
    /// The end of the log.
    End,
}

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

    /// Reads the next line into `buf` (cleared first, line ending removed). A read error (a
    /// truncated gzip member, an I/O error) names the line being read; the lines before it
    /// were returned whole.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> Result<NextLine, ReplayError> {
        buf.clear();
        // Room for the longest line and a `\r\n`; std's `read_until` keeps its fast search.
        let limit = MAX_LINE as u64 + 2;
        let n = (&mut self.inner)
            .take(limit)
            .read_until(b'\n', buf)
            .map_err(|source| self.read_error(source))?;
        if n == 0 {
            return Ok(NextLine::End);
        }
        self.line_no += 1;
        if buf.last() != Some(&b'\n') && n as u64 == limit {
            buf.clear();
            self.skip_rest_of_line()?;
            return Ok(NextLine::TooLong);
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        if buf.len() > MAX_LINE {
            buf.clear();
            return Ok(NextLine::TooLong);
        }
        Ok(NextLine::Line)
    }

    /// Reads through the next newline (or the end), keeping nothing.
    fn skip_rest_of_line(&mut self) -> Result<(), ReplayError> {
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(self.read_error(source)),
            };
            if chunk.is_empty() {
                return Ok(());
            }
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.inner.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let n = chunk.len();
                    self.inner.consume(n);
                }
            }
        }
    }

    /// A read error at the line after the last one read whole.
    fn read_error(&self, source: io::Error) -> ReplayError {
        ReplayError::Read {
            path: self.path.clone(),
            line: self.line_no + 1,
            source,
        }
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
        while r.next_line(&mut buf).unwrap() == NextLine::Line {
            out.push(String::from_utf8(buf.clone()).unwrap());
        }
        out
    }

    /// One 2 GB line used to be held whole (3 GB of RSS); now the buffer stays at the cap.
    #[test]
    fn a_line_past_the_cap_is_skipped_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("long.log");
        let mut f = std::io::BufWriter::new(File::create(&p).unwrap());
        f.write_all(b"first\n").unwrap();
        let block = vec![b'x'; 64 * 1024];
        for _ in 0..(4 * MAX_LINE / block.len()) {
            f.write_all(&block).unwrap();
        }
        f.write_all(b"\nexactly\r\n").unwrap();
        f.write_all(&vec![b'y'; MAX_LINE]).unwrap();
        f.write_all(b"\n").unwrap();
        f.write_all(&vec![b'z'; MAX_LINE + 1]).unwrap();
        f.write_all(b"\nlast").unwrap();
        drop(f);
        let mut r = LogReader::open(&p).unwrap();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            let n = r.next_line(&mut buf).unwrap();
            assert!(buf.capacity() <= 2 * (MAX_LINE + 2), "{}", buf.capacity());
            if n == NextLine::End {
                break;
            }
            got.push((n, buf.len(), r.line_no));
        }
        assert_eq!(
            got,
            [
                (NextLine::Line, 5, 1),
                (NextLine::TooLong, 0, 2),
                (NextLine::Line, 7, 3),
                (NextLine::Line, MAX_LINE, 4),
                (NextLine::TooLong, 0, 5),
                (NextLine::Line, 4, 6),
            ]
        );
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
