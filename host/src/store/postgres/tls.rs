//! TLS to the server, asked for in the URL with libpq's words, so a URL
//! that works with `psql` works with ax:
//!
//! | `sslmode` | what ax does |
//! |---|---|
//! | `disable` | plain TCP |
//! | `prefer` (the default) | TLS if the server offers it, else plain; the certificate is not checked (libpq does not check it either) |
//! | `require` | TLS or no connection; the certificate is not checked, unless `sslrootcert` is given: then as `verify-ca` (libpq's rule) |
//! | `verify-ca` | TLS; the certificate must chain to `sslrootcert` (or a public CA) |
//! | `verify-full` | as `verify-ca`, and it must name the host ax connected to |
//!
//! `sslrootcert=PATH` is a PEM file of the CA certificates to trust;
//! without it, `verify-ca` and `verify-full` trust the public CAs (Mozilla's,
//! from `webpki-roots`), which is what managed databases' certificates chain
//! to. `allow` (plain first, then TLS) is refused: tokio-postgres cannot do
//! it, and it only makes sense against servers that refuse plain
//! connections, for which `prefer` does the same.
//!
//! `sslcert=PATH` and `sslkey=PATH` (PEM: the client's certificate, with
//! its chain, and its private key — PKCS#8, PKCS#1 or SEC1) are presented
//! to a server that asks for a client certificate (`cert` in `pg_hba.conf`,
//! or `clientcert=verify-full`). Decision: unlike libpq, ax does not look
//! for `~/.postgresql/postgresql.crt` and `.key` when they are not given —
//! a server's process should not change what it presents because of files
//! in its user's home — and one given without the other is an error.
//!
//! TLS is rustls with the ring provider, as ax's outgoing HTTP is
//! (`tokio-postgres-rustls`); no OpenSSL is linked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What a URL asks of TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// `disable`.
    Disable,
    /// `prefer`.
    Prefer,
    /// `require`.
    Require,
    /// `verify-ca`.
    VerifyCa,
    /// `verify-full`.
    VerifyFull,
}

/// A URL's TLS settings, split out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tls {
    /// `sslmode`.
    pub(super) mode: Mode,
    /// `sslrootcert`.
    pub(super) root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`, given together.
    pub(super) client: Option<(PathBuf, PathBuf)>,
}

impl Tls {
    /// Splits `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL
    /// or key=value pairs): the URL without them, for tokio-postgres (which
    /// knows neither `verify-*` nor `sslrootcert`), and what they ask.
    pub(super) fn split(url: &str) -> Result<(String, Tls), String> {
        let mut mode = None;
        let mut root_cert = None;
        let (mut cert, mut private_key) = (None, None);
        let mut take = |key: &str, value: &str| -> Result<bool, String> {
            match key {
                "sslmode" => {
                    mode = Some(match value {
                        "disable" => Mode::Disable,
                        "prefer" => Mode::Prefer,
                        "require" => Mode::Require,
                        "verify-ca" => Mode::VerifyCa,
                        "verify-full" => Mode::VerifyFull,
                        "allow" => {
                            return Err("sslmode=allow is not supported: use prefer (TLS when \
                                        the server offers it) or disable"
                                .into());
                        }
                        other => {
                            return Err(format!(
                                "sslmode={other} is not one of disable, prefer, require, \
                                 verify-ca, verify-full"
                            ));
                        }
                    });
                    Ok(true)
                }
                "sslrootcert" => {
                    root_cert = Some(PathBuf::from(value));
                    Ok(true)
                }
                "sslcert" => {
                    cert = Some(PathBuf::from(value));
                    Ok(true)
                }
                "sslkey" => {
                    private_key = Some(PathBuf::from(value));
                    Ok(true)
                }
                _ => Ok(false),
            }
        };
        let rest = match url.split_once("://") {
            Some(_) => {
                let (base, query) = url.split_once('?').unwrap_or((url, ""));
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, &percent_decode(value))? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => {
                let mut kept = Vec::new();
                for pair in url.split_whitespace() {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, value.trim_matches('\''))? {
                        kept.push(pair);
                    }
                }
                kept.join(" ")
            }
        };
        let mode = mode.unwrap_or(Mode::Prefer);
        // libpq: `require` with a root certificate checks the chain.
        let mode = match (mode, &root_cert) {
            (Mode::Require, Some(_)) => Mode::VerifyCa,
            (mode, _) => mode,
        };
        let client = match (cert, private_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(
                    "sslcert and sslkey go together: give both (the client certificate and \
                     its private key) or neither"
                        .into(),
                );
            }
        };
        Ok((
            rest,
            Tls {
                mode,
                root_cert,
                client,
            },
        ))
    }

    /// tokio-postgres's mode for this one.
    pub(super) fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector: rustls, checking the server's certificate as the mode
    /// says.
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let verifier: Arc<dyn ServerCertVerifier> = match self.mode {
            Mode::Disable | Mode::Prefer | Mode::Require => Arc::new(Unchecked(provider)),
            Mode::VerifyCa | Mode::VerifyFull => {
                let roots = Arc::new(self.roots()?);
                let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| format!("TLS: {e}"))?;
                if self.mode == Mode::VerifyCa {
                    Arc::new(AnyName(verifier))
                } else {
                    verifier
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let (chain, key) = client_identity(cert, key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("sslcert and sslkey: {e}"))?
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }

    /// The CA certificates to trust: `sslrootcert`'s, else the public ones.
    fn roots(&self) -> Result<RootCertStore, String> {
        let Some(path) = &self.root_cert else {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            });
        };
        let shown = path.display();
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("sslrootcert {shown}: {e}"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
        if certs.is_empty() {
            return Err(format!("sslrootcert {shown} holds no PEM certificate"));
        }
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
        }
        Ok(roots)
    }
}

/// The client certificate chain of `sslcert` and the private key of
/// `sslkey`, each read as PEM, with the file named in any error.
fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let shown = cert.display();
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("sslcert {shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("sslcert {shown}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("sslcert {shown} holds no PEM certificate"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "sslkey {}: {e} (a PEM private key: PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    Ok((chain, key))
}

/// `%XX` sequences of a URL's query value, decoded.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `disable`, `prefer`, `require`: the connection is encrypted, the
/// server's certificate is not checked (libpq's meaning of these modes);
/// the handshake's signatures still are.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
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
            &self.0.signature_verification_algorithms,
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
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the certificate must chain to a trusted CA; the name it is
/// issued for is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, Tls) {
        Tls::split(url).expect("splits")
    }

    #[test]
    fn the_tls_words_leave_the_url_and_the_rest_stays() {
        let (url, tls) = split("postgres://ax@db:5432/ax");
        assert_eq!(url, "postgres://ax@db:5432/ax");
        assert_eq!((tls.mode, tls.root_cert), (Mode::Prefer, None));
        let (url, tls) = split(
            "postgres://ax@db/ax?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        );
        assert_eq!(url, "postgres://ax@db/ax?application_name=x");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        let (url, tls) = split("host=db user=ax sslmode=disable");
        assert_eq!(url, "host=db user=ax");
        assert_eq!(tls.mode, Mode::Disable);
        // libpq: require with a root certificate checks the chain.
        let (_, tls) = split("postgres://db/ax?sslmode=require&sslrootcert=ca.pem");
        assert_eq!(tls.mode, Mode::VerifyCa);
        let (_, tls) = split("postgres://db/ax?sslmode=require");
        assert_eq!(tls.mode, Mode::Require);
        assert_eq!(tls.ssl_mode(), SslMode::Require);
    }

    #[test]
    fn an_unknown_or_unsupported_mode_is_refused_in_words() {
        let e = Tls::split("postgres://db/ax?sslmode=allow").unwrap_err();
        assert!(e.contains("not supported"), "{e}");
        let e = Tls::split("postgres://db/ax?sslmode=verify").unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
    }

    #[test]
    fn a_root_certificate_file_that_is_not_pem_is_one_clear_error() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").expect("written");
        let tls = Tls {
            mode: Mode::VerifyFull,
            root_cert: Some(path),
            client: None,
        };
        let e = tls.connector().err().expect("refused");
        assert!(e.contains("no PEM certificate"), "{e}");
        let missing = Tls {
            mode: Mode::VerifyFull,
            root_cert: Some(dir.path().join("absent.pem")),
            client: None,
        };
        let e = missing.connector().err().expect("refused");
        assert!(e.contains("absent.pem"), "{e}");
        // A client certificate or key that cannot be read is named too.
        let client = |cert: &str, key: &str| Tls {
            mode: Mode::Require,
            root_cert: None,
            client: Some((dir.path().join(cert), dir.path().join(key))),
        };
        let e = client("ca.pem", "absent.key")
            .connector()
            .err()
            .expect("refused");
        assert!(
            e.contains("sslcert") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = client("absent.pem", "k.pem")
            .connector()
            .err()
            .expect("refused");
        assert!(e.contains("absent.pem"), "{e}");
    }

    #[test]
    fn a_client_certificate_and_key_are_given_together() {
        let (url, tls) = split("postgres://db/ax?sslmode=require&sslcert=%2Fc.pem&sslkey=%2Fc.key");
        assert_eq!(url, "postgres://db/ax");
        assert_eq!(
            tls.client,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/c.key")))
        );
        let e = Tls::split("postgres://db/ax?sslcert=c.pem").unwrap_err();
        assert!(e.contains("go together"), "{e}");
        let e = Tls::split("host=db sslkey=c.key").unwrap_err();
        assert!(e.contains("go together"), "{e}");
    }
}
