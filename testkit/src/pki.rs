//! A test PKI: two CAs, a server and a client certificate, as PEM files.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// PEM files of a test PKI, written into a test's folder.
pub struct Pki {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (p.self_signed(&key).unwrap(), key)
}

fn leaf(
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, sans[0]);
    p.extended_key_usages = vec![usage];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let cert = p.signed_by(&key, ca, ca_key).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    /// A CA, another CA, a server certificate for localhost and 127.0.0.1 and a client
    /// certificate, all signed by the first CA, as PEM files in `dir`.
    pub fn new(dir: &Path) -> Self {
        let (ca_cert, ca_key) = ca("crest test CA");
        let (other, _) = ca("some other CA");
        let (server_cert, server_key) = leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca_cert,
            &ca_key,
        );
        let (client_cert, client_key) = leaf(
            &["worker-1"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca_cert,
            &ca_key,
        );
        let write = |name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p
        };
        Self {
            ca: write("ca.pem", &ca_cert.pem()),
            other_ca: write("other-ca.pem", &other.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
        }
    }

    /// [`Pki::new`], but the server's certificate is a self-signed CA certificate (CA:TRUE,
    /// for localhost and 127.0.0.1: what `openssl req -x509` makes by default), and it is
    /// the CA too.
    pub fn ca_as_server(dir: &Path) -> Self {
        let mut pki = Self::new(dir);
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "localhost");
        let cert = p.self_signed(&key).unwrap();
        let cert_path = dir.join("ca-as-server.pem");
        let key_path = dir.join("ca-as-server.key");
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        pki.ca.clone_from(&cert_path);
        pki.server_cert = cert_path;
        pki.server_key = key_path;
        pki
    }
}
