//! TLS for the control plane (coordinator ↔ worker gRPC): reading PEM files with errors
//! that name the file and the flag, the rustls configurations of both ends, and turning a
//! failed dial into one line a person can act on.
//!
//! Both ends use rustls with the `ring` provider, the one tonic's `tls` feature brings.
//! The coordinator serves TLS on its own accept loop (it must tell a plaintext client from
//! a TLS one, see `crest::service`); the worker dials through tonic's `ClientTlsConfig`
//! with the same PEM bytes this module has already checked.
//!
//! This is TLS to the *coordinator*; TLS to the load target is a separate matter with its
//! own flags.

use std::error::Error as StdError;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls::{
    self, AlertDescription, CertificateError, ClientConfig, RootCertStore, ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
};

/// A control-plane TLS file that cannot be used: the flag, the file, and what is wrong
/// and what would be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {}: {why}", path.display())]
pub struct TlsFileError {
    /// The flag that named the file, e.g. `--control-cert`.
    pub flag: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong and what would be right.
    pub why: String,
}

impl TlsFileError {
    fn new(flag: &'static str, path: &Path, why: impl Into<String>) -> Self {
        Self {
            flag,
            path: path.to_path_buf(),
            why: why.into(),
        }
    }
}

const WANT_CERT: &str = "expected a PEM certificate (-----BEGIN CERTIFICATE-----)";
const WANT_KEY: &str =
    "expected a PEM private key (-----BEGIN PRIVATE KEY-----, PKCS#8, RSA or EC)";

/// The crypto provider both ends use (the one tonic's `tls` feature compiles in).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The most a certificate, key or CA file is read: a system CA bundle is a few hundred KB.
const MAX_PEM_FILE: u64 = 4 << 20;

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    crest_model::file::read_capped(path, MAX_PEM_FILE)
        .map_err(|e| TlsFileError::new(flag, path, format!("cannot read: {e}")))
}

/// Reads every certificate of a PEM file (at least one).
///
/// # Errors
/// [`TlsFileError`] naming `flag` and the file.
pub(crate) fn read_certs(
    flag: &'static str,
    path: &Path,
) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), TlsFileError> {
    let pem = read(flag, path)?;
    let bad = |why: String| TlsFileError::new(flag, path, format!("{why}; {WANT_CERT}"));
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("malformed PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    for c in &certs {
        webpki_parse(c).map_err(|e| bad(format!("not a valid X.509 certificate: {e}")))?;
    }
    Ok((pem, certs))
}

/// Parses a certificate the way rustls will (as a trust anchor, which any well-formed
/// certificate can be), so a broken file fails here and not at the first handshake.
fn webpki_parse(c: &CertificateDer<'_>) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    roots.add(c.clone()).map_err(|e| e.to_string())
}

/// Reads the private key of a PEM file.
///
/// # Errors
/// [`TlsFileError`] naming `flag` and the file.
pub(crate) fn read_key(
    flag: &'static str,
    path: &Path,
) -> Result<(Vec<u8>, PrivateKeyDer<'static>), TlsFileError> {
    let pem = read(flag, path)?;
    let bad = |why: String| TlsFileError::new(flag, path, format!("{why}; {WANT_KEY}"));
    let key = rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| bad(format!("malformed PEM: {e}")))?
        .ok_or_else(|| bad("no private key in it".into()))?;
    provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| bad(format!("unusable key: {e}")))?;
    Ok((pem, key))
}

/// A CA file as a root store (every certificate in it is trusted).
pub(crate) fn read_roots(
    flag: &'static str,
    path: &Path,
) -> Result<(Vec<u8>, RootCertStore), TlsFileError> {
    let (pem, certs) = read_certs(flag, path)?;
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| TlsFileError::new(flag, path, format!("not usable as a CA: {e}")))?;
    }
    Ok((pem, roots))
}

/// Where the control plane's server-side TLS material lives: `--control-cert`,
/// `--control-key` and `--control-client-ca`, declared once for whoever workers dial
/// (`crest run`, `crest relay`).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ServerFiles {
    /// Serve the workers' control plane over TLS with this certificate (PEM chain); workers
    /// then dial https:// with --control-ca.
    #[arg(
        id = "control_cert",
        long = "control-cert",
        value_name = "CERT",
        env = "CREST_CONTROL_CERT"
    )]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --control-cert.
    #[arg(
        id = "control_key",
        long = "control-key",
        value_name = "KEY",
        env = "CREST_CONTROL_KEY"
    )]
    pub key: Option<PathBuf>,
    /// Mutual TLS: workers must present a certificate (--control-client-cert) signed by
    /// this CA.
    #[arg(
        id = "control_client_ca",
        long = "control-client-ca",
        value_name = "CA",
        env = "CREST_CONTROL_CLIENT_CA"
    )]
    pub client_ca: Option<PathBuf>,
}

/// The coordinator's checked control-plane TLS: a rustls server configuration.
#[derive(Clone)]
pub struct ServerTls {
    /// The rustls configuration (ALPN h2).
    pub config: Arc<ServerConfig>,
    /// Workers must present a client certificate.
    pub mutual: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("mutual", &self.mutual)
            .finish_non_exhaustive()
    }
}

impl ServerFiles {
    /// Reads and checks the files; `None` when no TLS flag is given.
    ///
    /// # Errors
    /// [`TlsFileError`] naming the flag and the file: unreadable, no certificate, no key,
    /// a key that does not match the certificate, or a flag without its partner.
    pub fn load(&self) -> Result<Option<ServerTls>, TlsFileError> {
        let (cert_path, key_path) = match (&self.cert, &self.key) {
            (None, None) => {
                if let Some(ca) = &self.client_ca {
                    return Err(TlsFileError::new(
                        "--control-client-ca",
                        ca,
                        "mutual TLS needs the coordinator's own certificate too; give --control-cert and --control-key",
                    ));
                }
                return Ok(None);
            }
            (Some(c), Some(k)) => (c, k),
            (Some(c), None) => {
                return Err(TlsFileError::new(
                    "--control-cert",
                    c,
                    "needs --control-key (the certificate's private key)",
                ));
            }
            (None, Some(k)) => {
                return Err(TlsFileError::new(
                    "--control-key",
                    k,
                    "needs --control-cert (the certificate it belongs to)",
                ));
            }
        };
        let (_, certs) = read_certs("--control-cert", cert_path)?;
        let (_, key) = read_key("--control-key", key_path)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| {
                TlsFileError::new(
                    "--control-cert",
                    cert_path,
                    format!("TLS setup failed: {e}"),
                )
            })?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let (_, roots) = read_roots("--control-client-ca", ca)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots.into(), provider())
                        .build()
                        .map_err(|e| {
                            TlsFileError::new(
                                "--control-client-ca",
                                ca,
                                format!("not usable as a CA: {e}"),
                            )
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            TlsFileError::new(
                "--control-key",
                key_path,
                pair_error(&e, "--control-cert", cert_path),
            )
        })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Some(ServerTls {
            config: Arc::new(config),
            mutual: self.client_ca.is_some(),
        }))
    }
}

pub(crate) fn pair_error(e: &rustls::Error, cert_flag: &str, cert: &Path) -> String {
    match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "this key does not belong to the certificate in {cert_flag} {}; give the key it was issued for",
            cert.display()
        ),
        other => format!(
            "cannot pair it with the certificate in {cert_flag} {}: {other}",
            cert.display()
        ),
    }
}

/// `--token`: the shared secret a worker presents and a coordinator or relay checks
/// (empty: none). One declaration for `crest run`, `crest relay` and `crest-worker`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Token {
    /// Shared secret: a worker presents it, and a coordinator or relay refuses any worker
    /// without it.
    #[arg(
        long = "token",
        env = "CREST_TOKEN",
        default_value = "",
        hide_env_values = true
    )]
    pub secret: String,
}

/// Where a worker's (or a relay's, upstream) control-plane TLS material lives: the same
/// three flags on `crest-worker` and `crest relay`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ClientFiles {
    /// CA certificate (PEM) that signed the coordinator's --control-cert (default with
    /// https://: the system's CAs).
    #[arg(long = "control-ca", env = "CREST_CONTROL_CA")]
    pub ca: Option<PathBuf>,
    /// This process's certificate (PEM), for a coordinator that requires mutual TLS
    /// (crest run --control-client-ca).
    #[arg(long = "control-client-cert", env = "CREST_CONTROL_CLIENT_CERT")]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --control-client-cert.
    #[arg(long = "control-client-key", env = "CREST_CONTROL_CLIENT_KEY")]
    pub key: Option<PathBuf>,
}

/// A worker's checked control-plane TLS material (PEM bytes, already parsed once).
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientFiles {
    /// True when any TLS file is given.
    pub fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// The files read and checked when any is given; None (plaintext, or the system's CAs
    /// for https://) when none is.
    ///
    /// # Errors
    /// [`TlsFileError`] naming the flag and the file.
    pub fn load_given(&self) -> Result<Option<ClientTls>, TlsFileError> {
        if self.any() {
            self.load().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Reads and checks the files.
    ///
    /// # Errors
    /// [`TlsFileError`] naming the flag and the file.
    pub fn load(&self) -> Result<ClientTls, TlsFileError> {
        let ca_pem = match &self.ca {
            Some(ca) => Some(read_roots("--control-ca", ca)?.0),
            None => None,
        };
        let identity = match (&self.cert, &self.key) {
            (None, None) => None,
            (Some(c), Some(k)) => {
                let (cert_pem, certs) = read_certs("--control-client-cert", c)?;
                let (key_pem, key) = read_key("--control-client-key", k)?;
                let roots = RootCertStore::empty();
                ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| {
                        TlsFileError::new(
                            "--control-client-cert",
                            c,
                            format!("TLS setup failed: {e}"),
                        )
                    })?
                    .with_root_certificates(roots)
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| {
                        TlsFileError::new(
                            "--control-client-key",
                            k,
                            pair_error(&e, "--control-client-cert", c),
                        )
                    })?;
                Some((cert_pem, key_pem))
            }
            (Some(c), None) => {
                return Err(TlsFileError::new(
                    "--control-client-cert",
                    c,
                    "needs --control-client-key (the certificate's private key)",
                ));
            }
            (None, Some(k)) => {
                return Err(TlsFileError::new(
                    "--control-client-key",
                    k,
                    "needs --control-client-cert (the certificate it belongs to)",
                ));
            }
        };
        Ok(ClientTls { ca_pem, identity })
    }
}

impl ClientTls {
    /// tonic's client configuration for these files: the CA (or the system's CAs) and,
    /// for mutual TLS, this worker's identity.
    pub fn tonic_config(&self) -> tonic::transport::ClientTlsConfig {
        let mut c = tonic::transport::ClientTlsConfig::new();
        c = match &self.ca_pem {
            Some(pem) => c.ca_certificate(tonic::transport::Certificate::from_pem(pem)),
            None => c.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            c = c.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        c
    }
}

/// What a failed dial means, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialFailure {
    /// One line, without the program name: what is wrong and what would be right.
    pub line: String,
    /// Retrying cannot help (a certificate problem): the worker should stop.
    pub fatal: bool,
}

/// Whose certificate a verifier rejected, for [`rejected_certificate`]'s words.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer<'a> {
    /// Whose it is: `the server`, `the coordinator`.
    pub who: &'a str,
    /// Where its certificate is set: `tls-cert-file`, `--control-cert`.
    pub cert_setting: &'a str,
    /// The flag that names the CA to trust: `--cacert`, `--control-ca`.
    pub ca_flag: &'a str,
    /// The way to accept any certificate, if there is one (`--tls-skip-verify`).
    pub skip: Option<&'a str>,
}

/// What is wrong with a certificate the verifier rejected and what would be right, as the
/// rest of a sentence that begins "{who}'s certificate ". Covers what the callers do not
/// word themselves (an unknown issuer, a name, expiry): a CA certificate used as a
/// server's own (`openssl req -x509` makes CA:TRUE by default), a bad signature, a purpose
/// or algorithm the verifier does not accept; webpki's other refusals by name.
pub(crate) fn rejected_certificate(c: &CertificateError, p: Peer<'_>) -> String {
    let Peer {
        who,
        cert_setting,
        ca_flag,
        skip,
    } = p;
    let or_skip = skip
        .map(|s| format!(", or {s} to accept any certificate (with no protection)"))
        .unwrap_or_default();
    let reissue = format!("reissue it ({cert_setting}){or_skip}");
    #[allow(deprecated)]
    match c {
        CertificateError::Other(o) => match o.to_string().as_str() {
            "CaUsedAsEndEntity" => format!(
                "is a CA certificate (CA:TRUE, as `openssl req -x509` makes by default) used as {who}'s own: issue {who} a certificate signed by that CA (CA:FALSE, its names in subjectAltName) as {cert_setting}, and give {ca_flag} the CA{or_skip}"
            ),
            "EndEntityUsedAsCa" => format!(
                "chain has a certificate that is not a CA (CA:FALSE) in a CA's place: give {ca_flag} the CA that signed {who}'s certificate, or {reissue}"
            ),
            "NameConstraintViolation" => {
                format!("names something its CA may not vouch for (name constraints): {reissue}")
            }
            "PathLenConstraintViolated" | "MaximumPathDepthExceeded" => {
                format!("chain is longer than its CAs allow: {reissue}")
            }
            "UnsupportedCertVersion" => {
                format!("is not an X.509 v3 certificate: {reissue} as v3")
            }
            other => format!("was rejected by the verifier ({other}): {reissue}"),
        },
        CertificateError::BadSignature => format!(
            "does not carry a valid signature of the CA that should have signed it ({ca_flag} may hold another CA of the same name, e.g. one made again): give {ca_flag} the CA that signed it, or {reissue}"
        ),
        CertificateError::BadEncoding => format!("does not parse (malformed DER): {reissue}"),
        CertificateError::Revoked => format!("has been revoked: {reissue}"),
        CertificateError::UnhandledCriticalExtension => {
            format!("has a critical extension the verifier does not know: {reissue} without it")
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            format!(
                "is not for this use (its extendedKeyUsage lacks serverAuth): {reissue} with extendedKeyUsage serverAuth"
            )
        }
        CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => format!(
            "is signed with an algorithm the verifier does not accept (SHA-1 or MD5, say): {reissue} signed with SHA-256 or better"
        ),
        CertificateError::UnknownIssuer => format!(
            "is not signed by a CA that is trusted: give {ca_flag} the CA that signed it{or_skip}"
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!("is not valid for the name dialled: {reissue} with that name in subjectAltName")
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("has expired: {reissue}")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "is not valid yet: check both clocks".to_string()
        }
        other => format!("was rejected by the verifier ({other:?}): {reissue}"),
    }
}

/// The HTTP/2 `INADEQUATE_SECURITY` error code: a TLS coordinator answers a plaintext
/// client with a GOAWAY carrying it (RFC 9113 §7).
pub const INADEQUATE_SECURITY: u32 = 0xc;

/// Words a failed dial (or a session that failed before it was registered) to `url`.
/// `tls` is whether the worker dialled with TLS. The error chain is searched for the
/// cause: a rustls error, an HTTP/2 GOAWAY, or an I/O error.
pub fn explain_dial(url: &str, tls: bool, err: &(dyn StdError + 'static)) -> DialFailure {
    let reach = |why: String| DialFailure {
        line: format!("cannot reach the coordinator at {url}: {why}"),
        fatal: false,
    };
    let mut rustls_err: Option<&rustls::Error> = None;
    let mut h2_reason: Option<u32> = None;
    let mut io_kind: Option<std::io::ErrorKind> = None;
    let mut io_text: Option<String> = None;
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    let mut texts: Vec<String> = Vec::new();
    while let Some(e) = cur {
        texts.push(e.to_string());
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            rustls_err.get_or_insert(r);
        }
        if let Some(r) = e.downcast_ref::<h2::Error>().and_then(h2::Error::reason) {
            h2_reason.get_or_insert(u32::from(r));
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                rustls_err.get_or_insert(r);
            }
            io_kind.get_or_insert(io.kind());
            io_text.get_or_insert_with(|| io.to_string());
        }
        cur = e.source();
    }
    let all = texts.join(": ");
    if let Some(r) = rustls_err {
        return certificate_problem(url, r);
    }
    // h2 keeps only the kind and text of an I/O error, so a TLS alert the coordinator sent
    // after the handshake (TLS 1.3 checks the client's certificate then) is known by its
    // text: rustls words it "received fatal alert: <Description>".
    if let Some(alert) = texts
        .iter()
        .find_map(|t| t.split("received fatal alert: ").nth(1))
        .and_then(|a| alert_by_name(a.trim()))
    {
        return certificate_problem(url, &rustls::Error::AlertReceived(alert));
    }
    if h2_reason == Some(INADEQUATE_SECURITY) {
        return DialFailure {
            line: format!(
                "the coordinator at {url} requires TLS (crest run --control-cert) and refused this plaintext connection; dial https://… and give --control-ca (the CA that signed the coordinator's certificate)"
            ),
            fatal: true,
        };
    }
    use std::io::ErrorKind as K;
    match io_kind {
        Some(K::ConnectionRefused) => {
            reach("connection refused; is `crest run --listen` up there?".into())
        }
        Some(K::TimedOut) => {
            reach("connection timed out; is the address right and the port open?".into())
        }
        Some(K::UnexpectedEof | K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted)
            if tls =>
        {
            reach(format!(
                "{} during the TLS handshake; a plaintext coordinator (crest run without --control-cert)? then dial http://…",
                io_text.unwrap_or_else(|| "connection closed".into())
            ))
        }
        Some(K::UnexpectedEof | K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted) => {
            reach(format!(
                "{}; if the coordinator serves TLS (crest run --control-cert), dial https://… with --control-ca",
                io_text.unwrap_or_else(|| "connection closed".into())
            ))
        }
        Some(_) => reach(io_text.unwrap_or(all)),
        None if all.contains("dns error") || all.contains("failed to lookup address") => {
            reach(format!(
                "cannot resolve the host ({})",
                texts.last().cloned().unwrap_or_default()
            ))
        }
        None if !tls
            && (all.contains("connection closed")
                || all.contains("broken pipe")
                || all.contains("h2 protocol error")) =>
        {
            reach(format!(
                "the connection closed before HTTP/2 was up ({}); if the coordinator serves TLS (crest run --control-cert), dial https://… with --control-ca",
                texts.last().cloned().unwrap_or_default()
            ))
        }
        None => reach(texts.last().cloned().unwrap_or(all)),
    }
}

/// Words a dial to `url` that got no answer within `within`: the TCP connection came up,
/// then nothing (a TLS dial to a port that does not speak TLS, a plaintext dial to one
/// that waits for a TLS hello). Retried: the coordinator may be starting.
pub fn no_answer(url: &str, tls: bool, within: std::time::Duration) -> DialFailure {
    let line = if tls {
        format!(
            "no TLS answer from {url} within {within:?}: is the coordinator started with --control-cert? (use http:// for a plaintext control port)"
        )
    } else {
        format!(
            "no HTTP/2 answer from {url} within {within:?}: is it a crest coordinator's --listen port? (if the coordinator serves TLS, crest run --control-cert, dial https://… with --control-ca)"
        )
    };
    DialFailure { line, fatal: false }
}

/// Words a session the coordinator at `url` did not open within `within` (the connection
/// and its handshakes were up).
pub fn no_session(url: &str, within: std::time::Duration) -> DialFailure {
    DialFailure {
        line: format!(
            "the coordinator at {url} took the connection but did not open the session within {within:?}: is it a crest coordinator's --listen port, and not overloaded?"
        ),
        fatal: false,
    }
}

fn alert_by_name(name: &str) -> Option<AlertDescription> {
    use AlertDescription as A;
    [
        A::CertificateRequired,
        A::HandshakeFailure,
        A::BadCertificate,
        A::UnknownCA,
        A::CertificateExpired,
        A::CertificateUnknown,
        A::AccessDenied,
        A::DecryptError,
    ]
    .into_iter()
    .find(|a| format!("{a:?}") == name)
}

/// Names a TLS problem the worker (or the coordinator, by alert) found.
fn certificate_problem(url: &str, e: &rustls::Error) -> DialFailure {
    let fatal = |line: String| DialFailure { line, fatal: true };
    match e {
        rustls::Error::InvalidCertificate(c) => {
            let what = match c {
                CertificateError::UnknownIssuer => "is not signed by a CA this worker trusts: give --control-ca the CA that signed the coordinator's --control-cert".to_string(),
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                    "is not valid for the host in {url}: dial a name or address the certificate lists (its subjectAltName), or reissue it with this one"
                ),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => "has expired: reissue it".to_string(),
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => "is not valid yet: check both clocks".to_string(),
                other => rejected_certificate(
                    other,
                    Peer {
                        who: "the coordinator",
                        cert_setting: "--control-cert",
                        ca_flag: "--control-ca",
                        skip: None,
                    },
                ),
            };
            fatal(format!(
                "TLS to the coordinator at {url} failed: the coordinator's certificate {what}"
            ))
        }
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired)
        | rustls::Error::AlertReceived(AlertDescription::HandshakeFailure) => fatal(format!(
            "the coordinator at {url} requires a client certificate (mutual TLS, crest run --control-client-ca): give --control-client-cert and --control-client-key"
        )),
        rustls::Error::AlertReceived(
            a @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied),
        ) => fatal(format!(
            "the coordinator at {url} refused this worker's client certificate ({a:?}): give --control-client-cert a certificate signed by the coordinator's --control-client-ca"
        )),
        rustls::Error::InvalidMessage(_) => DialFailure {
            line: format!(
                "cannot reach the coordinator at {url}: it does not speak TLS ({e}); a plaintext coordinator (crest run without --control-cert)? then dial http://…"
            ),
            fatal: false,
        },
        other => fatal(format!("TLS to the coordinator at {url} failed: {other}")),
    }
}

/// The rule for plaintext dials (`http://`), checked before a worker starts:
/// - to a loopback host: fine, nothing leaves the machine;
/// - to another host *with a token*: refused unless `insecure` (`--insecure`): the token
///   would cross the network in the clear, and anyone who reads it can feed workers plans;
/// - to another host without a token: allowed, with a warning (returned as `Ok(Some)`).
///
/// `https://` URLs are always fine here (the TLS session protects the token).
///
/// # Errors
/// The refusal line, naming what is wrong and what would be right.
pub fn plaintext_rule(url: &str, token: bool, insecure: bool) -> Result<Option<String>, String> {
    let Ok(uri) = url.parse::<tonic::transport::Uri>() else {
        return Ok(None);
    };
    if uri.scheme_str() != Some("http") {
        return Ok(None);
    }
    let host = uri.host().unwrap_or_default();
    if is_loopback_host(host) {
        return Ok(None);
    }
    if token && !insecure {
        return Err(format!(
            "--coordinator {url}: refusing to send the token in the clear to {host}; serve TLS (crest run --control-cert/--control-key, then here --coordinator https://… --control-ca CA.pem), or pass --insecure (CREST_INSECURE=1) on a network you trust"
        ));
    }
    Ok(Some(format!(
        "the control plane to {url} is plaintext: anyone on the path can read the plans{}; use https:// with --control-ca",
        if token {
            " and the token"
        } else {
            " and, with no --token, impersonate the coordinator"
        }
    )))
}

/// True when `host` (a URL's host) is a loopback name or address.
fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h.eq_ignore_ascii_case("localhost") {
        return true;
    }
    h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_told_apart() {
        assert!(is_loopback_host("127.0.0.1"));
        assert!(is_loopback_host("localhost"));
        assert!(is_loopback_host("[::1]"));
        assert!(!is_loopback_host("10.0.0.1"));
        assert!(!is_loopback_host("coordinator"));
    }

    #[test]
    fn a_token_over_plaintext_to_another_host_needs_insecure() {
        assert_eq!(
            plaintext_rule("http://127.0.0.1:7600", true, false),
            Ok(None)
        );
        assert_eq!(
            plaintext_rule("https://10.0.0.1:7600", true, false),
            Ok(None)
        );
        let e = plaintext_rule("http://10.0.0.1:7600", true, false).unwrap_err();
        assert!(
            e.contains("refusing to send the token in the clear to 10.0.0.1"),
            "{e}"
        );
        assert!(e.contains("--insecure"), "{e}");
        let w = plaintext_rule("http://10.0.0.1:7600", true, true).unwrap();
        assert!(w.is_some_and(|w| w.contains("plaintext")));
        assert!(
            plaintext_rule("http://coordinator:7600", false, false)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_missing_file_is_named_with_its_flag() {
        let e = ClientFiles {
            ca: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        }
        .load()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--control-ca /nonexistent/ca.pem: cannot read:"),
            "{e}"
        );
    }

    #[test]
    fn a_key_without_its_certificate_is_refused() {
        let e = ServerFiles {
            key: Some("k.pem".into()),
            ..Default::default()
        }
        .load()
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "--control-key k.pem: needs --control-cert (the certificate it belongs to)"
        );
    }

    #[test]
    fn certificate_problems_are_named_and_end_the_worker() {
        let url = "https://10.0.0.1:7600";
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let f = explain_dial(url, true, &io);
        assert!(f.fatal);
        assert!(
            f.line
                .contains("is not signed by a CA this worker trusts: give --control-ca"),
            "{}",
            f.line
        );
        // After h2 only the text of the alert is left.
        let io = std::io::Error::other("received fatal alert: CertificateRequired");
        let f = explain_dial(url, true, &io);
        assert!(f.fatal);
        assert!(
            f.line.contains("requires a client certificate"),
            "{}",
            f.line
        );
    }

    /// A CA certificate (CA:TRUE) as the coordinator's own: words, not the verifier's
    /// `Other(OtherError(CaUsedAsEndEntity))`.
    #[test]
    fn a_ca_certificate_as_the_coordinators_own_is_named() {
        #[derive(Debug)]
        struct CaUsedAsEndEntity;
        impl std::fmt::Display for CaUsedAsEndEntity {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{self:?}")
            }
        }
        impl StdError for CaUsedAsEndEntity {}
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                Arc::new(CaUsedAsEndEntity),
            ))),
        );
        let f = explain_dial("https://10.0.0.1:7600", true, &io);
        assert!(f.fatal);
        assert_eq!(
            f.line,
            "TLS to the coordinator at https://10.0.0.1:7600 failed: the coordinator's certificate is a CA certificate (CA:TRUE, as `openssl req -x509` makes by default) used as the coordinator's own: issue the coordinator a certificate signed by that CA (CA:FALSE, its names in subjectAltName) as --control-cert, and give --control-ca the CA"
        );
    }

    #[test]
    fn a_dial_nobody_answers_names_the_likely_mismatch() {
        let within = std::time::Duration::from_secs(10);
        let f = no_answer("https://h:1", true, within);
        assert!(!f.fatal);
        assert_eq!(
            f.line,
            "no TLS answer from https://h:1 within 10s: is the coordinator started with --control-cert? (use http:// for a plaintext control port)"
        );
        let f = no_answer("http://h:1", false, within);
        assert!(
            f.line.contains("dial https://… with --control-ca"),
            "{}",
            f.line
        );
    }

    #[test]
    fn a_refused_connection_says_so_and_retries() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let f = explain_dial("http://127.0.0.1:7600", false, &io);
        assert_eq!(
            f.line,
            "cannot reach the coordinator at http://127.0.0.1:7600: connection refused; is `crest run --listen` up there?"
        );
        assert!(!f.fatal);
    }
}
