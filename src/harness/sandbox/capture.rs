//! Bounded output capture: keeps the head and the tail of a stream in memory (so a 100 MB
//! output costs a few kilobytes of RAM) and streams the full log (up to a byte cap) to disk.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

/// Head + tail of a byte stream, with the total length seen.
#[derive(Debug)]
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
    log: Option<BufWriter<File>>,
    log_written: u64,
    log_cap: u64,
}

impl Capture {
    /// `cap` bytes are kept in memory: a quarter for the head, the rest for the tail.
    pub fn new(cap: usize, log_path: Option<&Path>, log_cap: u64) -> std::io::Result<Self> {
        let head_cap = cap / 4;
        let log = match log_path {
            Some(p) => Some(BufWriter::new(File::create(p)?)),
            None => None,
        };
        Ok(Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            total: 0,
            log,
            log_written: 0,
            log_cap,
        })
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if let Some(log) = self.log.as_mut() {
            let room = self.log_cap.saturating_sub(self.log_written) as usize;
            let n = room.min(data.len());
            if n > 0 && log.write_all(&data[..n]).is_ok() {
                self.log_written += n as u64;
            }
        }
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    /// Drain a reader to EOF into the capture.
    pub fn drain_from(&mut self, mut r: impl Read) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }

    /// (text, truncated): head + elision notice + tail when the stream exceeded the cap.
    pub fn finish(mut self) -> (String, bool) {
        if let Some(mut log) = self.log.take() {
            if self.total > self.log_written {
                let _ = writeln!(
                    log,
                    "\n[execcritic: log truncated at {} of {} bytes]",
                    self.log_written, self.total
                );
            }
            let _ = log.flush();
        }
        let kept = (self.head.len() + self.tail.len()) as u64;
        let truncated = self.total > kept;
        let mut bytes = self.head;
        if truncated {
            let notice = format!(
                "\n[execcritic: {} bytes of output elided]\n",
                self.total - kept
            );
            bytes.extend_from_slice(notice.as_bytes());
        }
        bytes.extend(self.tail);
        (String::from_utf8_lossy(&bytes).into_owned(), truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_of_long_stream() {
        let mut c = Capture::new(40, None, 0).unwrap();
        for i in 0..1000 {
            c.push(format!("{i:04}\n").as_bytes());
        }
        let (text, truncated) = c.finish();
        assert!(truncated);
        assert!(text.starts_with("0000\n0001\n"));
        assert!(text.ends_with("0998\n0999\n"));
        assert!(text.contains("bytes of output elided"));
    }

    #[test]
    fn short_stream_is_verbatim() {
        let mut c = Capture::new(1024, None, 0).unwrap();
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.finish(), ("hello world".to_string(), false));
    }

    #[test]
    fn log_file_is_capped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut c = Capture::new(16, Some(&p), 10).unwrap();
        c.push(b"0123456789abcdef");
        c.finish();
        let log = std::fs::read_to_string(&p).unwrap();
        assert!(log.starts_with("0123456789\n[execcritic: log truncated"));
    }
}
