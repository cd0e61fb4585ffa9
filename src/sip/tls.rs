//! SIP over TLS: the trust store rsipstack is handed for trunks on
//! `transport: tls`, and the configuration of the optional TLS listener.
//!
//! rsipstack trusts no certificate authority unless told (its policy: the
//! caller owns the trust store), so without this every public trunk's
//! certificate would fail as an unknown issuer. We give it the system's roots,
//! as the HTTP clients use, plus the operator's own CA file for a PBX with a
//! private CA.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rsipstack::transport::tls::TlsConfig;

use super::settings::SipTlsSettings;

/// The TLS configuration of the SIP transport layer: the trust anchors for
/// connections out, and the listener's certificate and key when it has one.
pub fn transport_tls_config(settings: &SipTlsSettings) -> TlsConfig {
    let mut ca_pem = system_roots_pem();
    if let Some(extra) = &settings.extra_ca_pem {
        ca_pem.extend_from_slice(extra);
        ca_pem.push(b'\n');
    }
    TlsConfig {
        cert: settings.listen.as_ref().map(|l| l.cert_pem.clone()),
        key: settings.listen.as_ref().map(|l| l.key_pem.0.clone()),
        ca_certs: Some(ca_pem),
        ..TlsConfig::default()
    }
}

/// The platform's trusted roots as one PEM bundle (empty when it has none;
/// unreadable entries are skipped with a warning, as the HTTP clients do).
fn system_roots_pem() -> Vec<u8> {
    let found = rustls_native_certs::load_native_certs();
    for err in &found.errors {
        tracing::warn!(error = %err, "a system root certificate could not be read for SIP over TLS");
    }
    let mut pem = Vec::with_capacity(found.certs.len() * 2048);
    for cert in &found.certs {
        push_pem_certificate(&mut pem, cert.as_ref());
    }
    pem
}

/// Appends `der` as a PEM `CERTIFICATE` block (RFC 7468: base64 in 64-column lines).
fn push_pem_certificate(pem: &mut Vec<u8>, der: &[u8]) {
    pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
    let body = STANDARD.encode(der);
    for line in body.as_bytes().chunks(64) {
        pem.extend_from_slice(line);
        pem.push(b'\n');
    }
    pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn a_der_certificate_round_trips_through_the_pem_bundle() {
        let der: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        let mut pem = Vec::new();
        push_pem_certificate(&mut pem, &der);
        push_pem_certificate(&mut pem, &der[..10]);
        let back: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].as_ref(), der.as_slice());
        assert_eq!(back[1].as_ref(), &der[..10]);
        assert!(
            std::str::from_utf8(&pem)
                .unwrap()
                .lines()
                .all(|l| l.len() <= 64 || l.starts_with("-----"))
        );
    }

    #[test]
    fn the_operators_ca_is_trusted_beside_the_system_roots() {
        let extra = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec();
        let config = transport_tls_config(&SipTlsSettings {
            extra_ca_pem: Some(extra.clone()),
            listen: None,
        });
        let ca = config.ca_certs.unwrap();
        assert!(ca.windows(extra.len()).any(|w| w == extra.as_slice()));
        assert!(config.cert.is_none() && config.key.is_none());
    }
}
