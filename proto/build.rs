//! Compiles `crest.proto` with the vendored protoc, so a fresh machine needs no system protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment here.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=crest.proto");
    tonic_build::configure().compile_protos(&["crest.proto"], &["."])?;
    Ok(())
}
