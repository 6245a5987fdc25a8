//! TLS to the load target: the coordinator's files checked into a [`Tls`] (PEM bytes that
//! travel in the plan), the worker's one rustls client configuration per run built from
//! it, and the words for what goes wrong.
//!
//! Data flow: `crest run --tls --cacert … --cert … --key … --sni …` → [`TlsFiles::load`]
//! on the coordinator (every file read and parsed once, a bad one refused with its flag)
//! → `RunPlan.tls` → [`Client::new`] on each worker (one `ClientConfig`, shared by the
//! probe and every shard, so reconnects resume sessions from one cache) → each connection
//! a `rustls::ClientConnection` driven by the shard's epoll loop (`conn.rs`).
//!
//! Verification is full by default: the chain must lead to a trusted CA (the `--cacert`
//! file, or the system's roots) *and* the certificate must be valid for the server name
//! (`--sni`, else the target's host). memtier, valkey-benchmark and redis-cli check only
//! the chain; [`Verify::SkipHostname`] does the same, and [`Verify::None`] accepts any
//! certificate at all. Both are flagged in the report.
//!
//! A TLS failure counts as a connection error of one of a fixed set of kinds ([`kind`]),
//! so a hostile server cannot grow the books; [`explain`] turns it into the line a person
//! reads when the probe meets it before the run.

use crate::control_tls::{TlsFileError, provider, read_certs, read_key, read_roots};
use crest_model::target::{Secret, Tls, Verify};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_rustls::rustls::{
    self, AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
    client::WebPkiServerVerifier,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime},
};

/// The target-TLS files as the flags gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--cacert`: the CAs to trust (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// `--cert`: a client certificate chain, for servers with `tls-auth-clients yes`.
    pub cert: Option<PathBuf>,
    /// `--key`: its private key.
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// True when any file is given.
    pub fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// Reads and checks every file: certificates parse, the key parses and belongs to
    /// the certificate, the server name is a DNS name or an IP address.
    ///
    /// # Errors
    /// [`TlsFileError`] naming the flag and the file (or `--sni` and the name).
    pub fn load(&self, server_name: &str, verify: Verify) -> Result<Tls, TlsFileError> {
        ServerName::try_from(server_name.to_string()).map_err(|_| TlsFileError {
            flag: "--sni",
            path: PathBuf::from(server_name),
            why: "is not a DNS name or an IP address; give the name the server's certificate lists"
                .into(),
        })?;
        let ca_pem = match &self.ca {
            Some(ca) => Some(read_roots("--cacert", ca)?.0),
            None => None,
        };
        let client = match (&self.cert, &self.key) {
            (None, None) => None,
            (Some(c), Some(k)) => {
                let (cert_pem, certs) = read_certs("--cert", c)?;
                let (key_pem, key) = read_key("--key", k)?;
                identity_config(certs, key).map_err(|e| TlsFileError {
                    flag: "--key",
                    path: k.clone(),
                    why: crate::control_tls::pair_error(&e, "--cert", c),
                })?;
                let key = String::from_utf8(key_pem).map_err(|_| TlsFileError {
                    flag: "--key",
                    path: k.clone(),
                    why: "is not a text PEM file; expected -----BEGIN PRIVATE KEY-----".into(),
                })?;
                Some((cert_pem, Secret::new(key)))
            }
            (Some(c), None) => {
                return Err(TlsFileError {
                    flag: "--cert",
                    path: c.clone(),
                    why: "needs --key (the certificate's private key)".into(),
                });
            }
            (None, Some(k)) => {
                return Err(TlsFileError {
                    flag: "--key",
                    path: k.clone(),
                    why: "needs --cert (the certificate it belongs to)".into(),
                });
            }
        };
        Ok(Tls {
            ca_pem,
            client,
            server_name: server_name.to_string(),
            verify,
        })
    }
}

/// A client configuration holding `certs` and `key`: proves they pair.
fn identity_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ClientConfig, rustls::Error> {
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(certs, key)
}

/// One run's TLS client: the configuration every connection of the worker shares (its
/// session cache lets reconnects resume), and the name every certificate must match.
#[derive(Clone)]
pub struct Client {
    /// The rustls configuration.
    pub config: Arc<ClientConfig>,
    /// SNI and the name checked.
    pub name: ServerName<'static>,
    /// How much is checked.
    pub verify: Verify,
    /// A client certificate is presented.
    pub identity: bool,
}

impl Client {
    /// The name certificates are checked against, in words (a DNS name or an address).
    pub fn server_name(&self) -> String {
        match &self.name {
            ServerName::DnsName(d) => d.as_ref().to_string(),
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            other => format!("{other:?}"),
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("verify", &self.verify)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds the configuration of `tls` (already checked by the coordinator; checked
    /// again here, since a plan is input).
    ///
    /// # Errors
    /// What is wrong with the plan's TLS material.
    pub fn new(tls: &Tls) -> Result<Self, String> {
        let name = ServerName::try_from(tls.server_name.clone()).map_err(|_| {
            format!(
                "TLS server name {:?} is not a DNS name or an IP address",
                tls.server_name
            )
        })?;
        let roots = match &tls.ca_pem {
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for c in rustls_pemfile::certs(&mut pem.as_slice()) {
                    let c = c.map_err(|e| format!("the plan's CA PEM is malformed: {e}"))?;
                    roots
                        .add(c)
                        .map_err(|e| format!("the plan's CA is not usable: {e}"))?;
                }
                roots
            }
            None => system_roots(),
        };
        if roots.is_empty() && tls.verify != Verify::None {
            return Err("no CA to verify the target with: this worker's machine has no system CA certificates (the container image has none) and no --cacert was given; give crest run --cacert the CA file (for a public CA, e.g. /etc/ssl/certs/ca-certificates.crt of a machine that has it)".into());
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        let builder = match tls.verify {
            Verify::Full => builder.with_root_certificates(roots),
            Verify::SkipHostname => {
                let inner =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| format!("TLS setup failed: {e}"))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(SkipHostname(inner)))
            }
            Verify::None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny)),
        };
        let config = match &tls.client {
            None => builder.with_no_client_auth(),
            Some((cert_pem, key_pem)) => {
                let certs = rustls_pemfile::certs(&mut cert_pem.as_slice())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("the plan's client certificate is malformed: {e}"))?;
                let key = rustls_pemfile::private_key(&mut key_pem.expose().as_bytes())
                    .ok()
                    .flatten()
                    .ok_or("the plan's client key is malformed")?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| format!("the plan's client certificate and key: {e}"))?
            }
        };
        Ok(Self {
            config: Arc::new(config),
            name,
            verify: tls.verify,
            identity: tls.client.is_some(),
        })
    }

    /// A new connection's TLS state.
    ///
    /// # Errors
    /// rustls's, which for a checked configuration does not happen.
    pub fn connection(&self) -> Result<rustls::ClientConnection, rustls::Error> {
        rustls::ClientConnection::new(self.config.clone(), self.name.clone())
    }
}

/// A client configuration that accepts any certificate and presents none: for asking
/// whether a port speaks TLS at all, never for load. None if rustls refuses the
/// provider's defaults (it does not).
pub fn any_certificate() -> Option<Arc<ClientConfig>> {
    let b = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .ok()?;
    Some(Arc::new(
        b.dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny))
            .with_no_client_auth(),
    ))
}

/// The system's CA certificates (those that parse; a broken one is skipped, as curl does).
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let _ = roots.add_parsable_certificates(found.certs);
    roots
}

/// Checks the chain as webpki does but lets a certificate for another name pass.
#[derive(Debug)]
struct SkipHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for SkipHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate (`--tls-skip-verify`); signatures are still checked, so the
/// handshake is a real one, but nobody vouches for the server.
#[derive(Debug)]
struct AcceptAny;

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The connection-error kind of a TLS failure: one of a fixed set.
pub fn kind(e: &rustls::Error) -> &'static str {
    use AlertDescription as A;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => "tls: unknown_issuer",
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "tls: name_mismatch"
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "tls: expired",
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "tls: not_valid_yet"
            }
            _ => "tls: bad_certificate",
        },
        rustls::Error::AlertReceived(A::CertificateRequired) => "tls: certificate_required",
        rustls::Error::AlertReceived(
            A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied,
        ) => "tls: client_certificate_refused",
        rustls::Error::AlertReceived(A::HandshakeFailure) => "tls: handshake_failure",
        rustls::Error::AlertReceived(_) => "tls: alert",
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "tls: not_tls"
        }
        rustls::Error::PeerIncompatible(_) => "tls: incompatible",
        _ => "tls: other",
    }
}

/// One line for a TLS failure against `target`: what is wrong and what would be right.
pub fn explain(target: &str, name: &str, e: &rustls::Error) -> String {
    let k = kind(e);
    let what = match k {
        "tls: unknown_issuer" => "the server's certificate is not signed by a CA Crest trusts: give --cacert the CA that signed it (or --tls-skip-verify to accept any certificate, with no protection)".to_string(),
        "tls: name_mismatch" => format!(
            "the server's certificate is not valid for {name:?}: give --sni a name it lists (its subjectAltName), or --tls-skip-hostname to check the chain only (as memtier and valkey-benchmark do)"
        ),
        "tls: expired" => "the server's certificate has expired: reissue it".to_string(),
        "tls: not_valid_yet" => "the server's certificate is not valid yet: check both clocks".to_string(),
        "tls: certificate_required" | "tls: handshake_failure" => "the server requires a client certificate (tls-auth-clients yes): give --cert and --key".to_string(),
        "tls: client_certificate_refused" => "the server refused the client certificate: give --cert a certificate signed by the server's tls-ca-cert-file".to_string(),
        "tls: not_tls" => "the server does not speak TLS on this port: drop --tls (and use redis:// rather than rediss://), or give its tls-port".to_string(),
        _ => match e {
            rustls::Error::InvalidCertificate(c) => format!(
                "the server's certificate {}",
                crate::control_tls::rejected_certificate(
                    c,
                    crate::control_tls::Peer {
                        who: "the server",
                        cert_setting: "tls-cert-file",
                        ca_flag: "--cacert",
                        skip: Some("--tls-skip-verify"),
                    },
                )
            ),
            _ => format!("{e}"),
        },
    };
    format!("TLS to target {target} failed: {what}")
}

/// The connection-error kind of an I/O error on a connection that may be TLS: the TLS
/// failure's kind when rustls is inside it, else the errno's.
pub fn io_kind(e: &std::io::Error) -> std::borrow::Cow<'static, str> {
    match tls_error(e) {
        Some(t) => std::borrow::Cow::Borrowed(kind(t)),
        None => std::borrow::Cow::Owned(crate::sys::error_kind(e)),
    }
}

/// The rustls error inside an I/O error, if there is one.
pub fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// What a worker's TLS connections negotiated in a run, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handshakes {
    /// Full handshakes.
    pub full: u64,
    /// Handshakes that resumed an earlier session.
    pub resumed: u64,
    /// Protocol version of the first completed handshake (e.g. `TLSv1_3`).
    pub version: String,
    /// Its cipher suite.
    pub cipher: String,
}

impl Handshakes {
    /// Counts a completed handshake of `c`.
    pub fn count(&mut self, c: &rustls::ClientConnection) {
        match c.handshake_kind() {
            Some(rustls::HandshakeKind::Resumed) => self.resumed += 1,
            _ => self.full += 1,
        }
        if self.version.is_empty() {
            if let Some(v) = c.protocol_version() {
                self.version = format!("{v:?}");
            }
            if let Some(s) = c.negotiated_cipher_suite() {
                self.cipher = format!("{:?}", s.suite());
            }
        }
    }

    /// Adds another shard's counts (the first version and cipher seen stay).
    pub fn add(&mut self, o: &Handshakes) {
        self.full += o.full;
        self.resumed += o.resumed;
        if self.version.is_empty() {
            self.version.clone_from(&o.version);
            self.cipher.clone_from(&o.cipher);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A self-signed certificate for `names` and its key, as PEM files in `dir`.
    fn self_signed(dir: &Path, tag: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let ck = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        let cert = dir.join(format!("{tag}.pem"));
        let key = dir.join(format!("{tag}.key"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
        (cert, key)
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crest-ttls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_are_checked_and_the_key_never_shows() {
        let d = temp("files");
        let (cert, key) = self_signed(&d, "a", &["localhost"]);
        let (_, other_key) = self_signed(&d, "b", &["localhost"]);
        let files = TlsFiles {
            ca: Some(cert.clone()),
            cert: Some(cert.clone()),
            key: Some(key.clone()),
        };
        let tls = files.load("localhost", Verify::Full).unwrap();
        assert!(tls.ca_pem.is_some() && tls.client.is_some());
        let shown = format!("{tls:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        let client = Client::new(&tls).unwrap();
        assert!(client.identity);
        assert!(client.connection().is_ok());

        let wrong_pair = TlsFiles {
            key: Some(other_key),
            ..files.clone()
        };
        let e = wrong_pair.load("localhost", Verify::Full).unwrap_err();
        assert_eq!(e.flag, "--key");
        assert!(
            e.why
                .contains("does not belong to the certificate in --cert"),
            "{e}"
        );
        let e = TlsFiles {
            ca: Some(key.clone()),
            ..TlsFiles::default()
        }
        .load("localhost", Verify::Full)
        .unwrap_err();
        assert_eq!(e.flag, "--cacert");
        assert!(e.why.contains("no certificate in it"), "{e}");
        let e = TlsFiles {
            cert: Some(cert.clone()),
            ..TlsFiles::default()
        }
        .load("localhost", Verify::Full)
        .unwrap_err();
        assert_eq!(
            (e.flag, e.why.as_str()),
            ("--cert", "needs --key (the certificate's private key)")
        );
        let e = TlsFiles::default()
            .load("not a name", Verify::Full)
            .unwrap_err();
        assert_eq!(e.flag, "--sni");
        // An IP address is a name a certificate can be valid for.
        assert!(TlsFiles::default().load("127.0.0.1", Verify::None).is_ok());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_plan_with_a_broken_ca_is_refused_by_the_worker() {
        let tls = Tls {
            ca_pem: Some(
                b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".to_vec(),
            ),
            client: None,
            server_name: "h".into(),
            verify: Verify::Full,
        };
        let e = Client::new(&tls).unwrap_err();
        assert!(e.contains("CA"), "{e}");
        let e = Client::new(&Tls {
            server_name: "bad name".into(),
            ca_pem: None,
            ..tls
        })
        .unwrap_err();
        assert!(e.contains("not a DNS name"), "{e}");
    }

    #[test]
    fn failures_have_few_kinds_and_lines_that_name_the_fix() {
        use AlertDescription as A;
        let cases = [
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "tls: unknown_issuer",
                "give --cacert",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
                "tls: name_mismatch",
                "--tls-skip-hostname",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::Expired),
                "tls: expired",
                "reissue",
            ),
            (
                rustls::Error::AlertReceived(A::CertificateRequired),
                "tls: certificate_required",
                "give --cert and --key",
            ),
            (
                rustls::Error::AlertReceived(A::UnknownCA),
                "tls: client_certificate_refused",
                "tls-ca-cert-file",
            ),
            (
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
                "tls: not_tls",
                "drop --tls",
            ),
            (
                rustls::Error::AlertReceived(A::DecodeError),
                "tls: alert",
                "TLS to target",
            ),
        ];
        for (e, k, hint) in cases {
            assert_eq!(kind(&e), k);
            let line = explain("h:1", "h", &e);
            assert!(line.starts_with("TLS to target h:1 failed: "), "{line}");
            assert!(line.contains(hint), "{line}");
        }
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(A::CertificateRequired),
        );
        assert_eq!(tls_error(&io).map(kind), Some("tls: certificate_required"));
        assert!(tls_error(&std::io::Error::other("x")).is_none());
    }

    /// The verifier's own refusal of a CA-flagged self-signed certificate (what `openssl
    /// req -x509` makes) and of one signed by another CA, worded with the fix.
    #[test]
    fn a_ca_certificate_used_as_the_servers_own_is_named() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_leaf = p.self_signed(&key).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(ca_leaf.der().clone()).unwrap();
        let v = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
        let e = v
            .verify_server_cert(
                ca_leaf.der(),
                &[],
                &ServerName::try_from("localhost").unwrap(),
                &[],
                UnixTime::now(),
            )
            .unwrap_err();
        assert_eq!(kind(&e), "tls: bad_certificate");
        let line = explain("127.0.0.1:6380", "localhost", &e);
        assert_eq!(
            line,
            "TLS to target 127.0.0.1:6380 failed: the server's certificate is a CA certificate (CA:TRUE, as `openssl req -x509` makes by default) used as the server's own: issue the server a certificate signed by that CA (CA:FALSE, its names in subjectAltName) as tls-cert-file, and give --cacert the CA, or --tls-skip-verify to accept any certificate (with no protection)"
        );
        assert!(!line.contains("Other("), "{line}");
        for (c, hint) in [
            (
                CertificateError::BadSignature,
                "give --cacert the CA that signed it",
            ),
            (
                CertificateError::InvalidPurpose,
                "extendedKeyUsage serverAuth",
            ),
            (CertificateError::Revoked, "has been revoked"),
            (CertificateError::BadEncoding, "malformed DER"),
        ] {
            let line = explain("h:1", "h", &rustls::Error::InvalidCertificate(c));
            assert!(
                line.starts_with("TLS to target h:1 failed: the server's certificate "),
                "{line}"
            );
            assert!(line.contains(hint), "{line}");
        }
    }

    #[test]
    fn handshakes_add_up_and_keep_the_first_version() {
        let mut a = Handshakes {
            full: 2,
            resumed: 1,
            version: "TLSv1_3".into(),
            cipher: "X".into(),
        };
        a.add(&Handshakes {
            full: 1,
            resumed: 4,
            version: "TLSv1_2".into(),
            cipher: "Y".into(),
        });
        assert_eq!((a.full, a.resumed, a.version.as_str()), (3, 5, "TLSv1_3"));
        let mut empty = Handshakes::default();
        empty.add(&a);
        assert_eq!(empty.cipher, "X");
    }
}
