use std::net::{Ipv4Addr, TcpListener};

use crate::Error;

// Below Linux's ephemeral range (32768-60999), so outgoing connections never take these ports
// between our check and the component's bind.
const FIRST: u16 = 20000;
const COUNT: u16 = 12000;

/// A loopback port that nothing listens on right now.
pub(crate) fn pick() -> Result<u16, Error> {
    let mut last = None;
    for _ in 0..50 {
        let port = FIRST + random_u16()? % COUNT;
        match ensure_free(port) {
            Ok(()) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| unreachable!("the loop ran at least once")))
}

pub(crate) fn ensure_free(port: u16) -> Result<(), Error> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .map(drop)
        .map_err(|source| Error::PortInUse { port, source })
}

fn random_u16() -> Result<u16, Error> {
    let mut bytes = [0u8; 2];
    crate::pki::fill_random(&mut bytes)?;
    Ok(u16::from_le_bytes(bytes))
}
