//! Crest's wire contract: `crest.proto` (package `crest.v1`) compiled by tonic/prost.
//!
//! Everything generated lives in [`pb`]; the worker and coordinator crates turn these
//! messages into their own domain types at the boundary.

/// Generated protobuf and gRPC code for `crest.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("crest.v1");
}

/// Protocol version carried in `Register`; a worker with another version is refused.
pub const PROTOCOL_VERSION: u32 = 1;
