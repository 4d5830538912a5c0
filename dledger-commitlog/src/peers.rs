//! The DLedger peer list, `dLegerPeers` = `n0-127.0.0.1:40911;n1-127.0.0.1:40912`: the one
//! parser of it, used by the ledger's options (runtime/options.rs, which also resolves the
//! addresses) and by the broker's config (which keeps them as written).
//!
//! Syntax: items separated by `;` (blank items skipped); in each, the id is everything before
//! the first `-` and the address everything after it, both trimmed of whitespace; the id must
//! not be empty nor appear twice; the address must be `host:port` with a non-empty host and a
//! port that fits in 16 bits; at least one item.

use std::net::{SocketAddr, ToSocketAddrs};

/// One member of a DLedger group as the peer list names it; the address is kept as written
/// (not resolved), so a config can be checked and shown without a name lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DLedgerPeer {
    pub id: String,
    pub addr: String,
}

/// Parses the peer list's syntax (see the module docs); no name is resolved.
pub fn parse_dledger_peers(text: &str) -> Result<Vec<DLedgerPeer>, String> {
    let mut peers: Vec<DLedgerPeer> = Vec::new();
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('-')
            .ok_or_else(|| format!("peer {item:?} is not id-host:port"))?;
        let (id, addr) = (id.trim(), addr.trim());
        if id.is_empty() {
            return Err(format!("peer {item:?} has an empty id"));
        }
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("peer {item:?} lacks a port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("peer {item:?} has a bad address"));
        }
        if peers.iter().any(|p| p.id == id) {
            return Err(format!("peer id {id:?} appears twice"));
        }
        peers.push(DLedgerPeer {
            id: id.to_owned(),
            addr: addr.to_owned(),
        });
    }
    if peers.is_empty() {
        return Err("no peers".into());
    }
    Ok(peers)
}

/// Parses the peer list and resolves each address once, here (the first address a host name
/// resolves to): what a member needs to listen and to dial its peers.
pub fn parse_peers(text: &str) -> Result<Vec<(String, SocketAddr)>, String> {
    parse_dledger_peers(text)?
        .into_iter()
        .map(|p| {
            let item = format!("{}-{}", p.id, p.addr);
            let sa = p
                .addr
                .to_socket_addrs()
                .map_err(|e| format!("peer {item:?}: {e}"))?
                .next()
                .ok_or_else(|| format!("peer {item:?}: address resolves to nothing"))?;
            Ok((p.id, sa))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_reject_garbage() {
        let p = parse_peers(" n0-127.0.0.1:1 ; n1-localhost:2;").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, "n0");
        assert_eq!(p[1].1.port(), 2);
        assert!(parse_peers("n0:1").is_err());
        assert!(parse_peers("n0-127.0.0.1:1;n0-127.0.0.1:2").is_err());
        assert!(parse_peers("").is_err());
        assert!(parse_peers("-127.0.0.1:1").is_err());
    }

    #[test]
    fn the_list_keeps_addresses_as_written() {
        let p =
            parse_dledger_peers("n0-127.0.0.1:40911;n1-my-host:40912; n2 - [::1]:40913 ;").unwrap();
        let pairs: Vec<(&str, &str)> = p.iter().map(|p| (p.id.as_str(), p.addr.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("n0", "127.0.0.1:40911"),
                ("n1", "my-host:40912"),
                ("n2", "[::1]:40913")
            ]
        );
        for bad in [
            "",
            " ; ",
            "n0",
            "n0:1",
            "-127.0.0.1:1",
            "n0-127.0.0.1",
            "n0-:1",
            "n0-127.0.0.1:x",
            "n0-127.0.0.1:65536",
            "n0-a:1;n0-b:2",
        ] {
            assert!(parse_dledger_peers(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn whitespace_around_the_dash_is_trimmed_before_resolving() {
        let p = parse_peers("n0 - 127.0.0.1:1").unwrap();
        assert_eq!(p, [("n0".to_owned(), "127.0.0.1:1".parse().unwrap())]);
    }
}
