//! What each request is: the command mix, the key and the value, and their RESP encoding.
//!
//! The mix is deterministic (smooth weighted round robin, as nginx balances upstreams):
//! with SET:GET = 1:10 every run of 11 requests holds exactly one SET, so the server-side
//! ratio matches the asked one at any scale instead of only on average.

use crate::rng::Rng;

/// Commands the engine can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `GET key`
    Get,
    /// `SET key value`
    Set,
}

impl Command {
    /// Upper-case Redis spelling.
    pub fn name(self) -> &'static str {
        match self {
            Command::Get => "GET",
            Command::Set => "SET",
        }
    }

    /// Parses a Redis spelling, any case.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "GET" => Some(Command::Get),
            "SET" => Some(Command::Set),
            _ => None,
        }
    }
}

/// Bad workload settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A command Crest does not know.
    #[error("unknown command {0:?}; known: GET, SET")]
    UnknownCommand(String),
    /// All weights are zero.
    #[error("command weights sum to 0; give at least one command a weight > 0")]
    ZeroWeights,
    /// Keyspace of size zero.
    #[error("keyspace size is 0; give --keys ≥ 1")]
    NoKeys,
    /// Value size out of range.
    #[error("value size {0} is out of range; give 1 byte to 512 MB")]
    BadValueSize(u64),
}

/// The largest value Redis accepts (proto-max-bulk-len's default).
pub const MAX_VALUE: u64 = 512 * 1024 * 1024;

/// A validated workload: the mix, the keyspace and the value.
#[derive(Debug, Clone)]
pub struct Workload {
    commands: Vec<(Command, u32)>,
    keys: u64,
    prefix: Vec<u8>,
    value: Vec<u8>,
    /// `$<len>\r\n` of the value, precomputed.
    value_header: Vec<u8>,
}

impl Workload {
    /// Builds a workload.
    ///
    /// # Errors
    /// [`WorkloadError`] when the weights sum to 0, the keyspace is empty or the value
    /// size is out of range.
    pub fn new(
        commands: Vec<(Command, u32)>,
        keys: u64,
        prefix: &str,
        value_size: u64,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        if commands.iter().map(|c| u64::from(c.1)).sum::<u64>() == 0 {
            return Err(WorkloadError::ZeroWeights);
        }
        if keys == 0 {
            return Err(WorkloadError::NoKeys);
        }
        if value_size == 0 || value_size > MAX_VALUE {
            return Err(WorkloadError::BadValueSize(value_size));
        }
        // Printable pseudo-random bytes: incompressible enough, readable in redis-cli.
        let mut rng = Rng::new(seed);
        let value = (0..value_size)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.below(36) as usize])
            .collect();
        Ok(Self {
            commands,
            keys,
            prefix: prefix.as_bytes().to_vec(),
            value,
            value_header: format!("${value_size}\r\n").into_bytes(),
        })
    }

    /// Commands in mix order; a command's index here is its index in every result.
    pub fn commands(&self) -> Vec<Command> {
        self.commands.iter().map(|c| c.0).collect()
    }

    /// A fresh mixer over this workload's weights.
    pub fn mixer(&self) -> Mixer {
        Mixer {
            weights: self.commands.iter().map(|c| i64::from(c.1)).collect(),
            current: vec![0; self.commands.len()],
            total: self.commands.iter().map(|c| i64::from(c.1)).sum(),
        }
    }

    /// A key index, uniform over the keyspace.
    #[inline]
    pub fn key(&self, rng: &mut Rng) -> u64 {
        rng.below(self.keys)
    }

    /// Appends the RESP encoding of command number `cmd` on key `key` to `out`.
    #[inline]
    pub fn encode(&self, cmd: usize, key: u64, out: &mut Vec<u8>) {
        match self.commands[cmd].0 {
            Command::Get => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                self.encode_key(key, out);
            }
            Command::Set => {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                self.encode_key(key, out);
                out.extend_from_slice(&self.value_header);
                out.extend_from_slice(&self.value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    #[inline]
    fn encode_key(&self, key: u64, out: &mut Vec<u8>) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut k = key;
        loop {
            i -= 1;
            digits[i] = b'0' + (k % 10) as u8;
            k /= 10;
            if k == 0 {
                break;
            }
        }
        let len = self.prefix.len() + digits.len() - i;
        out.push(b'$');
        push_uint(out, len as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(&digits[i..]);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_uint(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Smooth weighted round robin: each call picks the command furthest behind its share.
#[derive(Debug, Clone)]
pub struct Mixer {
    weights: Vec<i64>,
    current: Vec<i64>,
    total: i64,
}

impl Mixer {
    /// Index of the next command.
    #[inline]
    pub fn pick(&mut self) -> usize {
        if self.weights.len() == 1 {
            return 0;
        }
        let mut best = 0;
        for i in 0..self.weights.len() {
            self.current[i] += self.weights[i];
            if self.current[i] > self.current[best] {
                best = i;
            }
        }
        self.current[best] -= self.total;
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_exact_in_every_cycle() {
        let w =
            Workload::new(vec![(Command::Set, 1), (Command::Get, 10)], 100, "k:", 8, 1).unwrap();
        let mut m = w.mixer();
        for _ in 0..100 {
            let mut sets = 0;
            for _ in 0..11 {
                if m.pick() == 0 {
                    sets += 1;
                }
            }
            assert_eq!(sets, 1);
        }
    }

    #[test]
    fn encodes_exact_resp() {
        let w = Workload::new(
            vec![(Command::Set, 1), (Command::Get, 1)],
            1000,
            "key:",
            3,
            1,
        )
        .unwrap();
        let mut out = Vec::new();
        w.encode(1, 42, &mut out);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$6\r\nkey:42\r\n");
        out.clear();
        w.encode(0, 0, &mut out);
        assert!(out.starts_with(b"*3\r\n$3\r\nSET\r\n$5\r\nkey:0\r\n$3\r\n"));
        assert!(out.ends_with(b"\r\n") && out.len() == 4 + 9 + 11 + 4 + 5);
    }

    #[test]
    fn bad_settings_are_errors() {
        assert_eq!(
            Workload::new(vec![(Command::Get, 0)], 1, "", 1, 1).unwrap_err(),
            WorkloadError::ZeroWeights
        );
        assert_eq!(
            Workload::new(vec![(Command::Get, 1)], 0, "", 1, 1).unwrap_err(),
            WorkloadError::NoKeys
        );
        assert_eq!(
            Workload::new(vec![(Command::Get, 1)], 1, "", 0, 1).unwrap_err(),
            WorkloadError::BadValueSize(0)
        );
    }
}
