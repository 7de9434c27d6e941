//! Session-scoped bearer tokens: a token that lets its holder append to and read the runs of one
//! scope only (run `SCOPE` and runs `SCOPE:…`), so a worker pod, or a user who can read the
//! session's Secret, cannot read or forge another session's log.
//!
//! `khs1.<scope>.<mac>` with `mac = HMAC-SHA256(SHA-256(server token), CONTEXT || scope)` in hex.
//! Stateless: whoever holds the server's token (the operator) mints them, and the server checks
//! them with the digest of its own token; nothing is stored. Revoking one means rotating the
//! server's token.

use crate::model::RunId;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "khs1.";
const CONTEXT: &[u8] = b"kube-harness session-log run scope v1\n";

/// What a request may touch, decided by its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The server's own token (or no authentication configured): every run.
    All,
    /// A scoped token: run `scope` and runs `scope:…`.
    Scope(String),
}

impl Access {
    pub fn allows(&self, run: &RunId) -> bool {
        match self {
            Access::All => true,
            Access::Scope(scope) => {
                let run = run.as_str();
                run == scope
                    || run
                        .strip_prefix(scope.as_str())
                        .is_some_and(|rest| rest.starts_with(':'))
            }
        }
    }
}

/// A token for `scope` (a valid run id without `.`), from the server's token.
pub fn mint(server_token: &str, scope: &str) -> Result<String, String> {
    RunId::parse(scope).map_err(|e| format!("scope {scope:?}: {}", e.message))?;
    if scope.contains('.') {
        return Err(format!("scope {scope:?} must not contain '.'"));
    }
    let key: [u8; 32] = Sha256::digest(server_token.trim().as_bytes()).into();
    Ok(format!("{PREFIX}{scope}.{}", hex::encode(mac(&key, scope))))
}

/// The scope of `presented` if it is a token minted from the server token whose SHA-256 is
/// `key`; `None` for anything else. The MAC is compared in constant time.
pub fn verify(key: &[u8; 32], presented: &str) -> Option<String> {
    let rest = presented.strip_prefix(PREFIX)?;
    let (scope, mac_hex) = rest.rsplit_once('.')?;
    let given = hex::decode(mac_hex).ok()?;
    let expected = mac(key, scope);
    if given.len() != expected.len() || !bool::from(given.ct_eq(&expected)) {
        return None;
    }
    Some(scope.to_string())
}

fn mac(key: &[u8; 32], scope: &str) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(CONTEXT);
    m.update(scope.as_bytes());
    m.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    #[test]
    fn a_minted_token_verifies_to_its_scope_and_nothing_else_does() {
        let t = mint("server-token\n", "team-a:0b6f3a52").unwrap();
        assert!(t.starts_with("khs1.team-a:0b6f3a52."));
        assert_eq!(
            verify(&key("server-token"), &t).as_deref(),
            Some("team-a:0b6f3a52")
        );
        // Another server's token, a changed scope, a changed MAC, junk: rejected.
        assert_eq!(verify(&key("other-token"), &t), None);
        let forged = t.replace("team-a", "team-b");
        assert_eq!(verify(&key("server-token"), &forged), None);
        let mut flipped = t.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        assert_eq!(verify(&key("server-token"), &flipped), None);
        for junk in [
            "",
            "khs1.",
            "khs1.a",
            "khs1.a.zz",
            "server-token",
            "khs1.a.00",
        ] {
            assert_eq!(verify(&key("server-token"), junk), None, "{junk:?}");
        }
    }

    #[test]
    fn a_scope_reaches_its_own_runs_only() {
        let run = |s: &str| RunId::parse(s).unwrap();
        let access = Access::Scope("ns:uid".into());
        assert!(access.allows(&run("ns:uid")));
        assert!(access.allows(&run("ns:uid:run-1")));
        for other in [
            "ns:uid2",
            "ns:ui",
            "ns",
            "ns:uidx:run",
            "other:uid",
            "ns.uid",
        ] {
            assert!(!access.allows(&run(other)), "{other}");
        }
        assert!(Access::All.allows(&run("anything")));
    }

    #[test]
    fn bad_scopes_are_refused_when_minting() {
        for bad in ["", "a/b", "a.b", ":a", &"x".repeat(300)] {
            assert!(mint("t", bad).is_err(), "{bad:?}");
        }
    }
}
