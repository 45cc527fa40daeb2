//! A throwaway certificate authority for tests that speak TLS, and the certificates it
//! issues for loopback (`localhost`, `127.0.0.1`), as PEM and DER.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};

pub use rcgen::ExtendedKeyUsagePurpose as Usage;

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM, and the certificate's DER.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl TestCa {
    pub fn new(common_name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        Self { issuer }
    }

    /// The CA's certificate as PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA's certificate as DER.
    pub fn der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// A certificate for `localhost` and `127.0.0.1` named `common_name`, with serial
    /// number `serial`, for `usage` (a server's or a client's).
    pub fn issue(&self, common_name: &str, serial: u64, usage: ExtendedKeyUsagePurpose) -> Issued {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.serial_number = Some(SerialNumber::from(serial));
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("leaf key");
        let certificate = params.signed_by(&key, &self.issuer).expect("sign the leaf");
        Issued {
            cert_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            der: certificate.der().to_vec(),
        }
    }
}
