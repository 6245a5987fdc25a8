//! The command line as a user meets it: bad input gets one clear line and exit code 2.

use crate::support::*;

/// Bad input: one clear line naming what is wrong, exit code 2, never a panic.
#[test]
fn bad_input_gets_one_clear_line_and_exit_code_2() {
    crest_fails(&["run", "--ratio", "1:0:3"], "--ratio");
    crest_fails(&["run", "--rate", "-5"], "--rate");
    crest_fails(&["run", "--duration", "ten"], "--duration");
    crest_fails(&["run", "--value-size", "0"], "--value-size");
    crest_fails(&["run", "--value-size", "600MB"], "--value-size");
    crest_fails(&["run", "--keys", "0"], "--keys");
    crest_fails(&["run", "--connections", "0"], "--connections");
    crest_fails(&["run", "--target", "nonsense"], "--target");
    crest_fails(&["run", "--requests", "5"], "--requests");
    crest_fails(&["run", "--mix", "GET=1,FLY=2"], "FLY");
    crest_fails(&["run", "--key-dist", "zipf:0"], "--key-dist");
    crest_fails(&["run", "--stages", "5s:10,-1s:4"], "--stages");
    crest_fails(&["run", "--interval", "1ms"], "--interval");
    // Absurd sizes are refused by name before any load, never a panic or a giant allocation.
    crest_fails(&["run", "--duration", "1e20"], "--duration");
    crest_fails(&["run", "--duration", "1e9"], "--duration");
    crest_fails(&["run", "--warmup", "100000000s"], "--warmup");
    crest_fails(&["run", "--timeout", "0s"], "--timeout");
    crest_fails(&["run", "--rate", "1e12"], "--rate");
    crest_fails(&["run", "--pipeline", "1000000"], "--pipeline");
    crest_fails(&["run", "--backlog-limit", "0"], "--backlog-limit");
    crest_fails(
        &["run", "--threads", "1", "--connections", "10000000"],
        "--connections",
    );
    crest_fails(
        &["run", "--stages", "5s:100", "--time-scale", "1e300"],
        "--time-scale",
    );
    crest_fails(
        &["run", "--threads", "2", "--connections", "1"],
        "--connections",
    );
    // Nothing listens on this port: the workers cannot connect, the run stops with exit 2.
    let port = free_port().to_string();
    let target = format!("127.0.0.1:{port}");
    crest_fails(
        &["run", "--target", &target, "--duration", "2s"],
        "cannot connect",
    );
}
