//! Connections to PostgreSQL with TLS: the one place that turns a Weir DSN into a
//! connection, for the target, the source's SQL connections and (through
//! [`TlsSetup`] and [`negotiate`]) the replication client.
//!
//! The DSN follows libpq: key=value or URL form, with libpq's `sslmode` semantics:
//!
//! | sslmode       | encrypts                      | verifies the server                  |
//! |---------------|-------------------------------|--------------------------------------|
//! | `disable`     | never                         | no                                   |
//! | `allow`       | only if plain is refused      | no (chain if a root file is present) |
//! | `prefer`      | if the server offers TLS      | no (chain if a root file is present) |
//! | `require`     | always                        | no (chain if a root file is present) |
//! | `verify-ca`   | always                        | chain against the roots              |
//! | `verify-full` | always                        | chain and host name                  |
//!
//! `sslrootcert` (a PEM file, or `system` for the system's roots; default
//! `~/.postgresql/root.crt` when present), `sslcert`/`sslkey` (PEM client certificate and
//! key; default `~/.postgresql/postgresql.crt`/`.key` when present) and
//! `channel_binding` (`disable`, `prefer`, `require`: SCRAM-SHA-256-PLUS with
//! `tls-server-end-point`) are taken out of the DSN before tokio-postgres parses the
//! rest. Unix-socket connections never use TLS (as in libpq).
//!
//! **Architecture Invariant**: no error holds the DSN, a password or a DSN parser's
//! message; an invalid TLS parameter is named, its value is not shown. Errors name the
//! host and, for TLS, what failed (certificate not trusted, host name mismatch,
//! expired, server without TLS) in words.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use sha2::Digest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use crate::config::Dsn;

pub use weir_core::dsn::*;

// ---- TLS setup ------------------------------------------------------------------------

/// A TLS file or setting that cannot be used, found when connecting.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("{parameter} {}: {problem}", path.display())]
    File {
        parameter: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error(
        "sslmode={mode} checks the server's certificate, but there is no root certificate to check it with: set sslrootcert to the PEM file of the CA that signed the server's certificate (managed services publish theirs), or sslrootcert=system with sslmode=verify-full for the system's trusted roots"
    )]
    NoRoots { mode: &'static str },
    #[error(
        "the system's trusted roots could not be loaded ({problem}): set sslrootcert to a PEM file of CA certificates"
    )]
    SystemRoots { problem: String },
    #[error("TLS settings: {0}")]
    Rustls(String),
}

/// How the server's certificate is checked, for error messages.
#[derive(Debug, Clone)]
enum Verification {
    /// Not checked (`allow`, `prefer`, `require` without a root file).
    None,
    /// Chain checked against these roots, host name not.
    Chain(RootCert),
    /// Chain and host name checked.
    Full(RootCert),
}

/// The rustls client configuration of a DSN, shared by the tokio-postgres connections
/// and the replication client.
#[derive(Clone)]
pub struct TlsSetup {
    config: Arc<ClientConfig>,
    verification: Verification,
}

impl fmt::Debug for TlsSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSetup")
            .field("verification", &self.verification)
            .finish_non_exhaustive()
    }
}

/// `~/.postgresql/NAME`, libpq's default place of TLS files, when it exists.
fn default_file(name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    let path = Path::new(&home).join(".postgresql").join(name);
    path.is_file().then_some(path)
}

fn file_error(parameter: &'static str, path: &Path, problem: impl Into<String>) -> TlsSetupError {
    TlsSetupError::File {
        parameter,
        path: path.to_owned(),
        problem: problem.into(),
    }
}

fn pem_problem(error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(e) => io_problem(e),
        _ => "is not a valid PEM file".to_owned(),
    }
}

fn io_problem(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => "cannot be read (permission denied)".to_owned(),
        _ => format!("cannot be read ({error})"),
    }
}

fn load_certs(
    parameter: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(parameter, path, pem_problem(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(parameter, path, pem_problem(&e)))?;
    if certs.is_empty() {
        return Err(file_error(parameter, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsSetup {
    /// Reads the files the settings name and builds the rustls configuration; `None`
    /// for `sslmode=disable` (no file is read).
    pub fn new(ssl: &SslSettings) -> Result<Option<TlsSetup>, TlsSetupError> {
        if ssl.mode == SslMode::Disable {
            return Ok(None);
        }
        let root_cert = match &ssl.root_cert {
            Some(root) => Some(root.clone()),
            None => default_file("root.crt").map(RootCert::File),
        };
        let roots = match &root_cert {
            None => None,
            Some(RootCert::File(path)) => {
                let mut store = RootCertStore::empty();
                for cert in load_certs("sslrootcert", path)? {
                    store.add(cert).map_err(|e| {
                        file_error(
                            "sslrootcert",
                            path,
                            format!("holds a certificate that cannot be used as a root ({e})"),
                        )
                    })?;
                }
                Some(store)
            }
            Some(RootCert::System) => {
                let found = rustls_native_certs::load_native_certs();
                let mut store = RootCertStore::empty();
                let (added, _ignored) = store.add_parsable_certificates(found.certs);
                if added == 0 {
                    let problem = found
                        .errors
                        .first()
                        .map_or_else(|| "none found".to_owned(), ToString::to_string);
                    return Err(TlsSetupError::SystemRoots { problem });
                }
                Some(store)
            }
        };
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
        let (verifier, verification): (Arc<dyn ServerCertVerifier>, Verification) =
            match (roots, root_cert) {
                (Some(roots), Some(root)) if ssl.mode == SslMode::VerifyFull => {
                    let verifier: Arc<dyn ServerCertVerifier> =
                        WebPkiServerVerifier::builder_with_provider(
                            Arc::new(roots),
                            Arc::clone(&provider),
                        )
                        .build()
                        .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
                    (verifier, Verification::Full(root))
                }
                (Some(roots), Some(root)) => {
                    let verifier: Arc<dyn ServerCertVerifier> = Arc::new(NoHostName {
                        roots: Some(roots),
                        algorithms: provider.signature_verification_algorithms,
                    });
                    (verifier, Verification::Chain(root))
                }
                _ if ssl.mode >= SslMode::VerifyCa => {
                    return Err(TlsSetupError::NoRoots {
                        mode: ssl.mode.name(),
                    });
                }
                _ => {
                    let verifier: Arc<dyn ServerCertVerifier> = Arc::new(NoHostName {
                        roots: None,
                        algorithms: provider.signature_verification_algorithms,
                    });
                    (verifier, Verification::None)
                }
            };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let cert = ssl.cert.clone().or_else(|| default_file("postgresql.crt"));
        let mut config = match cert {
            None => builder.with_no_client_auth(),
            Some(cert_path) => {
                let key_path = match &ssl.key {
                    Some(key) => key.clone(),
                    None => default_file("postgresql.key").ok_or_else(|| {
                        file_error(
                            "sslcert",
                            &cert_path,
                            "has no key: set sslkey to the PEM file of its private key",
                        )
                    })?,
                };
                let chain = load_certs("sslcert", &cert_path)?;
                let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
                    file_error(
                        "sslkey",
                        &key_path,
                        match e {
                            rustls::pki_types::pem::Error::Io(e) => io_problem(&e),
                            _ => "holds no unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1)"
                                .to_owned(),
                        },
                    )
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    if format!("{e:?}").contains("UnsupportedCertVersion") {
                        file_error(
                            "sslcert",
                            &cert_path,
                            "holds an X.509 version 1 certificate, which Weir does not accept: reissue it as version 3 (`openssl x509 -req … -extfile` with its extensions)".to_owned(),
                        )
                    } else {
                        file_error(
                            "sslkey",
                            &key_path,
                            format!("does not fit sslcert {} ({e})", cert_path.display()),
                        )
                    }
                })?
            }
        };
        config.enable_sni = ssl.sni;
        Ok(Some(TlsSetup {
            config: Arc::new(config),
            verification,
        }))
    }

    /// Runs the TLS handshake over `stream` with server `host` (the DSN's host name, or
    /// address): the stream and the channel-binding data (`tls-server-end-point`), or
    /// an error naming the host and what failed.
    pub async fn handshake<S>(
        &self,
        host: &str,
        stream: S,
    ) -> Result<(tokio_rustls::client::TlsStream<S>, Option<Vec<u8>>), TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(host.to_owned()).map_err(|_| TlsError {
            host: host.to_owned(),
            reason: "is not a valid host name or address for TLS".to_owned(),
            transient: false,
        })?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.config));
        let stream = connector
            .connect(name, stream)
            .await
            .map_err(|e| self.describe(host, &e))?;
        let binding = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| tls_server_end_point(cert));
        Ok((stream, binding))
    }

    fn describe(&self, host: &str, error: &io::Error) -> TlsError {
        let rustls_error = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>());
        let Some(rustls_error) = rustls_error else {
            return TlsError {
                host: host.to_owned(),
                reason: format!("the connection failed during the TLS handshake ({error})"),
                transient: true,
            };
        };
        let roots = match &self.verification {
            Verification::None => String::new(),
            Verification::Chain(root) | Verification::Full(root) => root.to_string(),
        };
        let reason = match rustls_error {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => format!(
                    "the server's certificate is not trusted: no CA of {roots} issued it (unknown CA); set sslrootcert to the CA that signed it"
                ),
                CertificateError::NotValidForName => format!(
                    "host name mismatch: the server's certificate is not issued for {host}; connect with a name the certificate holds, or check the host"
                ),
                CertificateError::NotValidForNameContext { presented, .. } if presented.is_empty() => format!(
                    "host name mismatch: the server's certificate names no host in its subjectAltName (a name only in its CN is not read, as by current TLS clients; libpq falls back to it): reissue it with `subjectAltName = DNS:{host}` (or `IP:` for an address), or use sslmode=verify-ca"
                ),
                CertificateError::NotValidForNameContext { presented, .. } => format!(
                    "host name mismatch: the server's certificate is not issued for {host} (it is for {}); connect with a name the certificate holds, or check the host",
                    presented.iter().map(|name| presented_name(name)).collect::<Vec<_>>().join(", ")
                ),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "the server's certificate has expired".to_owned()
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "the server's certificate is not valid yet (check this machine's clock)".to_owned()
                }
                CertificateError::Revoked => "the server's certificate is revoked".to_owned(),
                CertificateError::BadSignature
                | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
                | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                    "the server's certificate has a bad or unsupported signature".to_owned()
                }
                other if format!("{other:?}").contains("UnsupportedCertVersion") => {
                    "the server's certificate is X.509 version 1, which Weir does not accept: reissue it as version 3 (`openssl x509 -req … -extfile` with a `subjectAltName`)".to_owned()
                }
                other => format!("the server's certificate cannot be used ({other:?})"),
            },
            rustls::Error::AlertReceived(alert) => format!(
                "the server ended the TLS handshake ({alert:?}); if it asks for a client certificate, set sslcert and sslkey to one it trusts"
            ),
            rustls::Error::PeerIncompatible(_) => {
                "the server and Weir share no TLS version or cipher suite (Weir speaks TLS 1.2 and 1.3)".to_owned()
            }
            other => format!("the TLS handshake failed ({other})"),
        };
        TlsError {
            host: host.to_owned(),
            reason,
            transient: false,
        }
    }
}

/// A name of a certificate as webpki presents it (`DnsName("db.example.com")`,
/// `IpAddress(10.0.0.1)`), as a person writes it.
fn presented_name(name: &str) -> String {
    let inner = name
        .strip_prefix("DnsName(")
        .or_else(|| name.strip_prefix("IpAddress("))
        .and_then(|rest| rest.strip_suffix(')'));
    match inner {
        Some(inner) => inner.trim_matches('"').to_owned(),
        None => name.to_owned(),
    }
}

/// A TLS failure: the host and what failed, in words.
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS with {host}: {reason}")]
pub struct TlsError {
    pub host: String,
    pub reason: String,
    /// The connection broke (a retry may cure it), as opposed to a certificate or
    /// settings problem.
    pub transient: bool,
}

impl TlsError {
    /// The server answered the SSLRequest with "no" and the sslmode requires TLS.
    pub fn not_offered(host: &str, mode: SslMode) -> TlsError {
        TlsError {
            host: host.to_owned(),
            reason: format!(
                "the server does not support TLS (its ssl setting is off), and sslmode={} requires it: turn ssl on in the server, or (never over an untrusted network: the password and rows would travel in clear) set sslmode=prefer",
                mode.name()
            ),
            transient: false,
        }
    }
}

/// Sends the SSLRequest on a fresh connection: `true` if the server agrees to TLS.
/// Exactly one byte is read, so nothing the server sends before the handshake can be
/// taken for part of it.
pub async fn negotiate<S>(stream: &mut S) -> io::Result<bool>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::new();
    frontend::ssl_request(&mut buf);
    stream.write_all(&buf).await?;
    stream.flush().await?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await?;
    match answer {
        [b'S'] => Ok(true),
        [b'N'] => Ok(false),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the server answered the TLS request with neither yes nor no",
        )),
    }
}

// ---- certificate verifiers ------------------------------------------------------------

/// The certificate check of the modes that do not verify the host name: `verify-ca`
/// (and `require` with roots) checks the chain up to a root, validity dates included;
/// `require` (and weaker) without roots takes any certificate. Either way the
/// handshake's signatures are checked (the server holds the key of the certificate it
/// sent).
#[derive(Debug)]
struct NoHostName {
    /// `None`: any certificate.
    roots: Option<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
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

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

// ---- channel binding --------------------------------------------------------------------

/// RFC 5929 `tls-server-end-point`: the hash of the server's certificate with the hash
/// of its signature algorithm (SHA-256 for MD5 and SHA-1). `None` for an algorithm
/// without a single hash (RSASSA-PSS, Ed25519), as PostgreSQL's server has none either.
pub fn tls_server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    const RSA: [u8; 8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01];
    const ECDSA_SHA2: [u8; 7] = [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03];
    const ECDSA_SHA1: [u8; 7] = [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x01];
    enum Hash {
        Sha224,
        Sha256,
        Sha384,
        Sha512,
    }
    let oid = signature_algorithm_oid(cert)?;
    let hash = if let Some(last) = oid.strip_prefix(&RSA[..]) {
        match last {
            [4 | 5] => Hash::Sha256, // md5, sha1
            [11] => Hash::Sha256,
            [12] => Hash::Sha384,
            [13] => Hash::Sha512,
            [14] => Hash::Sha224,
            _ => return None,
        }
    } else if let Some(last) = oid.strip_prefix(&ECDSA_SHA2[..]) {
        match last {
            [1] => Hash::Sha224,
            [2] => Hash::Sha256,
            [3] => Hash::Sha384,
            [4] => Hash::Sha512,
            _ => return None,
        }
    } else if oid == ECDSA_SHA1 {
        Hash::Sha256
    } else {
        return None;
    };
    Some(match hash {
        Hash::Sha224 => sha2::Sha224::digest(cert).to_vec(),
        Hash::Sha256 => sha2::Sha256::digest(cert).to_vec(),
        Hash::Sha384 => sha2::Sha384::digest(cert).to_vec(),
        Hash::Sha512 => sha2::Sha512::digest(cert).to_vec(),
    })
}

/// One DER element: `(tag, contents, rest)`.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, input) = input.split_first()?;
    let (&first, mut input) = input.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7F);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, rest) = (input.get(..count)?, input.get(count..)?);
        input = rest;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    Some((tag, input.get(..len)?, input.get(len..)?))
}

/// The OID of `Certificate.signatureAlgorithm` (the contents of the OID element).
fn signature_algorithm_oid(cert: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let (SEQUENCE, certificate, _) = der_element(cert)? else {
        return None;
    };
    let (SEQUENCE, _tbs, rest) = der_element(certificate)? else {
        return None;
    };
    let (SEQUENCE, algorithm, _) = der_element(rest)? else {
        return None;
    };
    match der_element(algorithm)? {
        (OID, oid, _) => Some(oid),
        _ => None,
    }
}

// ---- tokio-postgres -----------------------------------------------------------------------

/// tokio-postgres's TLS connector over rustls, with channel-binding data.
#[derive(Debug, Clone)]
pub struct MakeRustls {
    setup: Option<TlsSetup>,
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = TlsError;

    /// tokio-postgres asks for a connector for every host, whatever the sslmode: with
    /// `disable` it is never used (and would refuse).
    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, TlsError> {
        Ok(RustlsConnect {
            setup: self.setup.clone(),
            host: domain.to_owned(),
        })
    }
}

/// The connector of one host.
#[derive(Debug)]
pub struct RustlsConnect {
    setup: Option<TlsSetup>,
    host: String,
}

type HandshakeFuture<S> = Pin<Box<dyn Future<Output = Result<RustlsStream<S>, TlsError>> + Send>>;

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = TlsError;
    type Future = HandshakeFuture<S>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some(setup) = self.setup else {
                return Err(TlsError {
                    host: self.host,
                    reason: "TLS is off (sslmode=disable)".to_owned(),
                    transient: false,
                });
            };
            let (stream, binding) = setup.handshake(&self.host, stream).await?;
            Ok(RustlsStream { stream, binding })
        })
    }
}

/// A TLS stream for tokio-postgres.
#[derive(Debug)]
pub struct RustlsStream<S> {
    stream: tokio_rustls::client::TlsStream<S>,
    binding: Option<Vec<u8>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        match &self.binding {
            Some(data) => ChannelBinding::tls_server_end_point(data.clone()),
            None => ChannelBinding::none(),
        }
    }
}

/// An open tokio-postgres connection (its driver: spawn it).
pub type PgConnection =
    tokio_postgres::Connection<tokio_postgres::Socket, RustlsStream<tokio_postgres::Socket>>;

/// Why a connection could not be made. Never holds the DSN or a password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Dsn(#[from] DsnError),
    #[error(transparent)]
    TlsSetup(#[from] TlsSetupError),
    #[error("cannot connect to PostgreSQL at {hosts} (sslmode={mode}){hint}")]
    Postgres {
        hosts: String,
        mode: &'static str,
        hint: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl ConnectError {
    /// Whether a retry may cure it: the server unreachable or going away, not a
    /// settings, certificate or authentication problem.
    pub fn is_transient(&self) -> bool {
        let ConnectError::Postgres { source, .. } = self else {
            return false;
        };
        if let Some(tls) = find_cause::<TlsError>(source) {
            return tls.transient;
        }
        if source.to_string().contains("server does not support TLS") {
            return false;
        }
        match source.code() {
            Some(code) => {
                // 53300: no connection slot left, which other sessions ending frees.
                let code = code.code();
                code.starts_with("08") || code.starts_with("57") || code == "53300"
            }
            None => source.as_db_error().is_none(),
        }
    }
}

fn find_cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        cause = e.source();
    }
    None
}

/// A hint for a failed connection, in words that point at the setting to change.
fn hint(mode: SslMode, used_tls: bool, error: &tokio_postgres::Error) -> String {
    if error.to_string().contains("server does not support TLS") {
        return format!(
            ": the server does not support TLS (its ssl setting is off), and sslmode={} requires it: turn ssl on in the server, or (never over an untrusted network) set sslmode=prefer",
            mode.name()
        );
    }
    let mut chain = String::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        chain.push_str(&e.to_string());
        cause = e.source();
    }
    if let Some(at) = chain.find("received fatal alert: ") {
        // TLS 1.3: the server judges the client's certificate after the handshake.
        let alert = chain[at + "received fatal alert: ".len()..]
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or_default();
        return format!(
            ": the server ended the TLS session ({alert}): it refused the client certificate (sslcert): UnknownCA: it was not signed by a CA of the server's ssl_ca_file; CertificateExpired: it has expired; CertificateRequired: set sslcert and sslkey"
        );
    }
    let Some(db) = error.as_db_error() else {
        return String::new();
    };
    let (message, code) = (db.message(), db.code().code());
    if code == "28000"
        && !used_tls
        && (message.contains("no encryption") || mode == SslMode::Disable)
    {
        return ": the server refuses connections without TLS for this user and database (pg_hba.conf): set sslmode=require, or verify-full with sslrootcert, in the DSN".to_owned();
    }
    if code == "28000" && message.contains("certificate") {
        return if used_tls && mode != SslMode::Disable && message.contains("failed") {
            ": the server checked the client certificate (sslcert) and refused it for this user: its CN must be the user name (or map to it in pg_ident.conf)".to_owned()
        } else {
            ": the server authenticates this user with a client certificate: set sslcert and sslkey in the DSN".to_owned()
        };
    }
    if code == "53300" {
        return ": the server has no connection left (max_connections, or the role's or database's CONNECTION LIMIT): Weir opens `[engine] parallelism` + 1 connections to the target, and to a PostgreSQL source a replication and a catalog connection, and `[source] snapshot_parallelism` more during a first load; lower those, raise the limit, or close other sessions. A live run retries".to_owned();
    }
    String::new()
}

/// Connects with tokio-postgres as the DSN says (`sslmode` semantics above); the
/// connection's driver is returned to be spawned.
pub async fn connect(dsn: &Dsn) -> Result<(tokio_postgres::Client, PgConnection), ConnectError> {
    let settings = PgSettings::from_dsn(dsn)?;
    connect_with(&settings).await
}

/// [`connect`] with parsed settings.
pub async fn connect_with(
    settings: &PgSettings,
) -> Result<(tokio_postgres::Client, PgConnection), ConnectError> {
    use tokio_postgres::config::SslMode as Mode;
    let mode = settings.ssl.mode;
    let setup = TlsSetup::new(&settings.ssl)?;
    let tls = MakeRustls { setup };
    let attempt = |ssl_mode: Mode| {
        let mut config = settings.config().clone();
        config.ssl_mode(ssl_mode);
        let tls = tls.clone();
        async move { config.connect(tls).await }
    };
    let error = |source: tokio_postgres::Error, used_tls: bool| ConnectError::Postgres {
        hosts: settings.hosts(),
        mode: mode.name(),
        hint: hint(mode, used_tls, &source),
        source,
    };
    // libpq: TLS is never used over a Unix socket, whatever the sslmode (the server
    // offers none there). tokio-postgres would ask for it and fail `require`.
    let hosts = settings.config().get_hosts();
    let only_sockets = !hosts.is_empty()
        && hosts
            .iter()
            .all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
    match mode {
        _ if only_sockets => attempt(Mode::Disable).await.map_err(|e| error(e, false)),
        SslMode::Disable => attempt(Mode::Disable).await.map_err(|e| error(e, false)),
        SslMode::Allow => match attempt(Mode::Disable).await {
            Ok(connected) => Ok(connected),
            // Refused in clear (pg_hba.conf): try again with TLS, as libpq does.
            Err(e) if e.code().is_some_and(|c| c.code().starts_with("28")) => {
                tracing::debug!(
                    "the server refused a connection without TLS; trying TLS (sslmode=allow)"
                );
                attempt(Mode::Require).await.map_err(|e| error(e, true))
            }
            Err(e) => Err(error(e, false)),
        },
        SslMode::Prefer => attempt(Mode::Prefer).await.map_err(|e| error(e, false)),
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            attempt(Mode::Require).await.map_err(|e| error(e, true))
        }
    }
}

#[cfg(test)]
mod tests;
