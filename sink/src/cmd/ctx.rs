//! What a handler runs with: [`Ctx`], holding the shared state, the calling connection, the
//! command's time and the reply buffer, with the keyspace shortcuts every family uses.
//!
//! Depends on [`crate::state`], [`crate::store`] and [`super::reply`]; the family files
//! take it from here, never from the dispatch table, which builds one per command.

use std::sync::MutexGuard;

use super::reply::Reply;
use crate::state::{Conn, Sink};
use crate::store::{Entry, Now, Shard};

/// The state one command runs with.
pub(crate) struct Ctx<'a> {
    /// Shared state.
    pub(crate) sink: &'a Sink,
    /// The calling connection.
    pub(crate) conn: &'a mut Conn,
    /// The command's time.
    pub(crate) now: Now<'a>,
    /// Where the reply goes.
    pub(crate) out: &'a mut Vec<u8>,
    /// Set by `QUIT`: close after writing the replies.
    pub(crate) close: bool,
}

impl<'a> Ctx<'a> {
    /// Locks the shard holding `key`. The guard borrows the sink, not the context, so the
    /// handler can go on writing to `out` while it holds it.
    pub(crate) fn shard(&self, key: &[u8]) -> MutexGuard<'a, Shard> {
        self.sink.store.shard(key)
    }

    /// Runs `f` on the live entry under `key`, or appends `missing` when there is none;
    /// counts a keyspace hit or miss as Redis's read lookups do.
    pub(crate) fn read(
        &mut self,
        key: &[u8],
        missing: &[u8],
        f: impl FnOnce(&Entry, &mut Vec<u8>) -> Result<(), &'static str>,
    ) -> Reply {
        let mut shard = self.shard(key);
        let out = &mut *self.out;
        let found = shard.read(key, &mut self.now, |entry| f(entry, out));
        drop(shard);
        self.conn.stats.lookup(found.is_some());
        match found {
            Some(result) => Ok(result?),
            None => {
                self.out.extend_from_slice(missing);
                Ok(())
            }
        }
    }
}
