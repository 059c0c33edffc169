//! A minimal synchronous RESP2 client: enough to send commands as arrays of bulk strings and
//! read the replies a store needs (no pub/sub, no cluster redirects).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Simple(String),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    /// A server error reply (`-ERR …`).
    Error(String),
}

impl Reply {
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            Reply::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// The most elements or bytes a reply may announce (a corrupt stream must not allocate wildly).
const MAX_LEN: usize = 512 * 1024 * 1024;

pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

impl Conn {
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Conn> {
        let sa = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| bad("address resolves to nothing"))?;
        let s = TcpStream::connect_timeout(&sa, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&buf)?;
        self.read_reply()
    }

    fn line(&mut self) -> io::Result<String> {
        let mut l = String::new();
        if self.reader.read_line(&mut l)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        Ok(l.trim_end_matches(['\r', '\n']).to_string())
    }

    fn read_reply(&mut self) -> io::Result<Reply> {
        let l = self.line()?;
        let (kind, rest) = l.split_at(l.len().min(1));
        let num = || -> io::Result<i64> { rest.parse().map_err(|_| bad("bad length")) };
        Ok(match kind {
            "+" => Reply::Simple(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(num()?),
            "$" => {
                let n = num()?;
                if n < 0 {
                    return Ok(Reply::Nil);
                }
                let n = usize::try_from(n).map_err(|_| bad("bad length"))?;
                if n > MAX_LEN {
                    return Err(bad("bulk too large"));
                }
                let mut b = vec![0; n + 2];
                self.reader.read_exact(&mut b)?;
                b.truncate(n);
                Reply::Bulk(b)
            }
            "*" => {
                let n = num()?;
                if n < 0 {
                    return Ok(Reply::Nil);
                }
                let n = usize::try_from(n).map_err(|_| bad("bad length"))?;
                if n > MAX_LEN {
                    return Err(bad("array too large"));
                }
                let mut v = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    v.push(self.read_reply()?);
                }
                Reply::Array(v)
            }
            _ => return Err(bad("unknown reply type")),
        })
    }
}
