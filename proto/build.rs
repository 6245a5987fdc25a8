//! Compiles `crest.proto` with the vendored protoc, so a fresh machine needs no system protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // A password or a private key must not reach a log through `{:?}`: the Debug of
    // `Login` and `TargetTls` is written by hand.
    config.skip_debug([".crest.v1.Login", ".crest.v1.TargetTls"]);
    println!("cargo:rerun-if-changed=crest.proto");
    tonic_build::configure().compile_protos_with_config(config, &["crest.proto"], &["."])?;
    Ok(())
}
