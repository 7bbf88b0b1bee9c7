use std::io::Read;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// The address at which the VM test tier's guests reach the API server (a `guestfwd` of
/// QEMU's user-mode network); the serving certificate names it.
pub const GUEST_FORWARD_ADDRESS: &str = "10.0.2.100";

/// The cluster IP of the `kubernetes` Service: the first address of the service range.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// PEM files the components are started with.
#[derive(Debug)]
pub(crate) struct Pki {
    pub ca_cert: String,
    pub ca_key: String,
    pub server_cert: String,
    pub server_key: String,
    /// Signs service account tokens (ECDSA P-256, PKCS#8).
    pub service_account_key: String,
    /// Verifies them: kube-apiserver's `--service-account-key-file` takes only public keys.
    pub service_account_pub: String,
}

impl Pki {
    pub fn generate() -> Result<Pki, Error> {
        let (ca_cert, ca_key_pem) = new_ca()?;
        let issuer = Issuer::new(ca_params()?, KeyPair::from_pem(&ca_key_pem)?);

        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default.svc".to_owned(),
            // Where QEMU's user-mode network forwards the API server to the VM test tier's
            // guests (vm/): a guest verifies this certificate like any client.
            GUEST_FORWARD_ADDRESS.to_owned(),
            // The `kubernetes` Service's cluster IP, which pods on the real-node tier's guests
            // are given (KUBERNETES_SERVICE_HOST) and which each guest routes to the forward.
            KUBERNETES_SERVICE_IP.to_owned(),
        ])?;
        server
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let server_cert = server.signed_by(&server_key, &issuer)?.pem();

        let service_account = KeyPair::generate()?;
        Ok(Pki {
            ca_cert,
            ca_key: ca_key_pem,
            server_cert,
            server_key: server_key.serialize_pem(),
            service_account_key: service_account.serialize_pem(),
            service_account_pub: service_account.public_key_pem(),
        })
    }
}

/// A new testenv CA: its certificate and key, PEM.
pub(crate) fn new_ca() -> Result<(String, String), Error> {
    let key = KeyPair::generate()?;
    let cert = ca_params()?.self_signed(&key)?.pem();
    Ok((cert, key.serialize_pem()))
}

/// The CA's parameters: the same every time, so that the CA's key alone (kept in the control
/// plane's directory) can issue more certificates later, for the real-node tier's kubelets.
fn ca_params() -> Result<CertificateParams, Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "testenv-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(ca)
}

/// A client certificate and its key (PEM) signed by the CA whose key is `ca_key_pem`: the API
/// server authenticates it as user `common_name` in group `organization`.
pub(crate) fn client_certificate(
    ca_key_pem: &str,
    common_name: &str,
    organization: &str,
) -> Result<(String, String), Error> {
    let issuer = Issuer::new(ca_params()?, KeyPair::from_pem(ca_key_pem)?);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, organization);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    Ok((params.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
}

/// A serving certificate and key (PEM) for `names`, signed by the CA whose key is `ca_key_pem`.
pub(crate) fn server_certificate(
    ca_key_pem: &str,
    names: &[&str],
) -> Result<(String, String), Error> {
    let issuer = Issuer::new(ca_params()?, KeyPair::from_pem(ca_key_pem)?);
    let key = KeyPair::generate()?;
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut params = CertificateParams::new(names)?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    Ok((params.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
}

/// A bearer token that is hard to guess: 32 hex digits from the kernel's random source.
pub(crate) fn random_token() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub(crate) fn fill_random(buf: &mut [u8]) -> Result<(), Error> {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(Error::io("read /dev/urandom"))
}
