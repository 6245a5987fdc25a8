//! Compiles `crest.proto` with the vendored protoc, so a fresh machine needs no system protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // A password or a private key must not reach a log through `{:?}`: the Debug of
    // `Login` and `TargetTls` is written by hand.
    config.skip_debug([".crest.v1.Login", ".crest.v1.TargetTls"]);
    // A histogram's bytes are a slice of the message's receive buffer, not a copy: the
    // coordinator takes every worker's every interval (bench/coordinator-memory.sh).
    config.bytes([".crest.v1.Histogram.v2"]);
    println!("cargo:rerun-if-changed=crest.proto");
    tonic_build::configure().compile_protos_with_config(config, &["crest.proto"], &["."])?;
    Ok(())
}
