//! TLS for the WebSocket transport. The gateway holds a self-signed certificate made on
//! first use (`bridge-tls/` in its state directory, key 0600); nodes trust exactly that
//! certificate by its SHA-256 fingerprint (`sha256:` + 64 hex digits), given when they
//! pair — no certificate authority is involved, so no other certificate, however it was
//! issued, is accepted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use caps::{Fs, WriteOptions};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpStream;

use crate::BridgeError;

/// The name the gateway's certificate carries and nodes present as SNI (the pin, not the
/// name, is what is checked).
pub const CERT_NAME: &str = "warden-gateway";
/// The certificate's directory in the gateway's state directory.
pub const TLS_DIR: &str = "bridge-tls";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `sha256:<hex>` of a DER certificate.
pub fn fingerprint(cert_der: &[u8]) -> String {
    format!("sha256:{}", policy::hex(&Sha256::digest(cert_der)))
}

/// Parse a fingerprint as nodes are given it (`sha256:` optional, `:` separators and case
/// ignored).
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], BridgeError> {
    let hex: String = text
        .trim()
        .trim_start_matches("sha256:")
        .trim_start_matches("SHA256:")
        .chars()
        .filter(|c| *c != ':')
        .collect();
    let bad = || {
        BridgeError::Invalid(format!(
            "{text:?} is not a certificate fingerprint (expected sha256: and 64 hex digits, as `warden gateway run --bridge-tls` prints)"
        ))
    };
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// The gateway's certificate and key.
pub struct GatewayCert {
    /// DER certificate.
    pub cert: Vec<u8>,
    /// PKCS#8 DER key.
    key: Vec<u8>,
}

impl GatewayCert {
    /// `sha256:` fingerprint nodes pin.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert)
    }

    /// Read the certificate kept in `state_dir`, making one on first use.
    pub fn load_or_create(fs: &dyn Fs, state_dir: &Path) -> Result<GatewayCert, BridgeError> {
        let dir = state_dir.join(TLS_DIR);
        let (cert_path, key_path) = (dir.join("cert.der"), dir.join("key.der"));
        let state =
            |p: &PathBuf, e: caps::CapsError| BridgeError::State(format!("{}: {e}", p.display()));
        match (fs.read(&cert_path), fs.read(&key_path)) {
            (Ok(cert), Ok(key)) => {
                let meta = fs
                    .symlink_metadata(&key_path)
                    .map_err(|e| state(&key_path, e))?;
                if meta.mode & 0o077 != 0 {
                    return Err(BridgeError::State(format!(
                        "{}: mode {:04o}; the gateway's TLS key must be 0600",
                        key_path.display(),
                        meta.mode
                    )));
                }
                return Ok(GatewayCert { cert, key });
            }
            (Err(e), _) if !e.is_not_found() => return Err(state(&cert_path, e)),
            (_, Err(e)) if !e.is_not_found() => return Err(state(&key_path, e)),
            _ => {}
        }
        let made = rcgen::generate_simple_self_signed(vec![CERT_NAME.to_owned()])
            .map_err(|e| BridgeError::State(format!("cannot make a TLS certificate: {e}")))?;
        let cert = made.cert.der().to_vec();
        let key = made.signing_key.serialize_der();
        fs.create_dir_all(&dir, 0o700).map_err(|e| state(&dir, e))?;
        fs.write_atomic(&key_path, &key, WriteOptions::private())
            .map_err(|e| state(&key_path, e))?;
        fs.write_atomic(&cert_path, &cert, WriteOptions::private())
            .map_err(|e| state(&cert_path, e))?;
        Ok(GatewayCert { cert, key })
    }

    /// The acceptor for the gateway's Bridge listener.
    pub fn acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, BridgeError> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| BridgeError::State(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(self.cert.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
            )
            .map_err(|e| BridgeError::State(format!("the gateway's TLS key is unusable: {e}")))?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// Accepts exactly the certificate with the pinned fingerprint, whatever its name or
/// issuer; signatures are still checked, so the peer must hold its key.
#[derive(Debug)]
struct Pinned {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let seen: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if bool::from(seen.ct_eq(&self.pin)) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the gateway's certificate ({}) is not the pinned one",
                fingerprint(end_entity.as_ref())
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// TLS to the gateway over `tcp`, accepting only the certificate `fingerprint` names.
pub async fn connect(
    tcp: TcpStream,
    fingerprint: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, BridgeError> {
    let pin = parse_fingerprint(fingerprint)?;
    let provider = provider();
    let verifier = Arc::new(Pinned {
        pin,
        algorithms: provider.signature_verification_algorithms,
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BridgeError::State(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(CERT_NAME).map_err(BridgeError::io)?;
    connector
        .connect(name, tcp)
        .await
        .map_err(|e| BridgeError::Io(format!("TLS with the gateway failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_in_the_forms_people_paste() {
        let fp = fingerprint(b"cert");
        let raw = parse_fingerprint(&fp).unwrap();
        assert_eq!(
            parse_fingerprint(&fp.to_uppercase().replace("SHA256:", "sha256:")).unwrap(),
            raw
        );
        let colons: Vec<String> = fp.as_bytes()[7..]
            .chunks(2)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        assert_eq!(parse_fingerprint(&colons.join(":")).unwrap(), raw);
        assert!(parse_fingerprint("sha256:abcd").is_err());
        assert!(parse_fingerprint(&"zz".repeat(32)).is_err());
    }
}
