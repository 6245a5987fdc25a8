//! Cluster hash slots (issue #9, item 4, groundwork): `crest_model::slot::key_slot` agrees
//! with the server's own `CLUSTER KEYSLOT` on both servers, for Crest's key names and for
//! keys with hash tags.

use crate::support::*;
use crest_model::slot::key_slot;
use crest_resp::Frame;

#[test]
fn key_slots_match_cluster_keyslot_on_both_servers() {
    for kind in [Kind::Redis, Kind::Valkey] {
        let server = Server::with_args(kind, &["--cluster-enabled", "yes"]);
        let mut keys: Vec<String> = (0..300).map(|i| format!("crest:{i}")).collect();
        keys.extend((0..100).map(|i| format!("{{user{i}}}.following")));
        keys.extend(["foo{}{bar}", "{}", "a{", "}{x}", "{{a}}", "x{y}z{w}"].map(String::from));
        for k in &keys {
            let reply = server.command(&[b"CLUSTER", b"KEYSLOT", k.as_bytes()]);
            assert_eq!(
                reply,
                Frame::Integer(i64::from(key_slot(k.as_bytes()))),
                "{kind:?} {k}"
            );
        }
    }
}
