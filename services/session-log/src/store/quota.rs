//! Byte quotas per session and per namespace: what one tenant may store, so that one session's
//! appends cannot fill the disk (or, for the memory store, the memory) every other session uses.
//!
//! A run id `NAMESPACE:UID[:…]` belongs to session `NAMESPACE:UID` (the scope of its session's
//! token, `scope.rs`) and to namespace `NAMESPACE`; a run id without `:` is its own session and
//! namespace. The bytes counted are the canonical JSON of the stored events (what a read returns),
//! summed over every run of the session or namespace. They are rebuilt from the stored events
//! when a store opens. A leaf: the stores use it, it uses nothing of theirs.

use super::types::StoreError;
use std::collections::HashMap;

/// Default most bytes of events one session (all its runs) may store.
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 256 * 1024 * 1024;
/// Default most bytes of events one namespace (all its sessions) may store.
pub const DEFAULT_MAX_NAMESPACE_BYTES: u64 = 1024 * 1024 * 1024;

/// The limits in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    pub session_bytes: u64,
    pub namespace_bytes: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            session_bytes: DEFAULT_MAX_SESSION_BYTES,
            namespace_bytes: DEFAULT_MAX_NAMESPACE_BYTES,
        }
    }
}

/// The session a run belongs to: its first two `:`-separated parts.
pub fn session_of(run: &str) -> &str {
    match run.match_indices(':').nth(1) {
        Some((i, _)) => &run[..i],
        None => run,
    }
}

/// The namespace a run belongs to: its first `:`-separated part.
pub fn namespace_of(run: &str) -> &str {
    run.split(':').next().unwrap_or(run)
}

/// Bytes stored (or planned) per session and per namespace.
#[derive(Default, Debug)]
pub struct Usage {
    sessions: HashMap<String, u64>,
    namespaces: HashMap<String, u64>,
}

impl Usage {
    pub fn add(&mut self, run: &str, bytes: u64) {
        add_to(&mut self.sessions, session_of(run), bytes);
        add_to(&mut self.namespaces, namespace_of(run), bytes);
    }

    pub fn session(&self, run: &str) -> u64 {
        self.sessions.get(session_of(run)).copied().unwrap_or(0)
    }

    pub fn namespace(&self, run: &str) -> u64 {
        self.namespaces.get(namespace_of(run)).copied().unwrap_or(0)
    }

    /// Whether `bytes` more for `run` stay within `quotas`, counting what is stored (`self`) and
    /// what is planned but not yet committed (`pending`).
    pub fn admit(
        &self,
        pending: &Usage,
        quotas: &Quotas,
        run: &str,
        bytes: u64,
    ) -> Result<(), StoreError> {
        let session = self.session(run) + pending.session(run);
        if session + bytes > quotas.session_bytes {
            return Err(StoreError::QuotaExceeded {
                scope: "session",
                name: session_of(run).into(),
                used: session,
                limit: quotas.session_bytes,
            });
        }
        let namespace = self.namespace(run) + pending.namespace(run);
        if namespace + bytes > quotas.namespace_bytes {
            return Err(StoreError::QuotaExceeded {
                scope: "namespace",
                name: namespace_of(run).into(),
                used: namespace,
                limit: quotas.namespace_bytes,
            });
        }
        Ok(())
    }
}

/// Adds without allocating a key that is already there (a reload adds once per event).
fn add_to(counts: &mut HashMap<String, u64>, key: &str, bytes: u64) {
    match counts.get_mut(key) {
        Some(count) => *count += bytes,
        None => {
            counts.insert(key.to_string(), bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_group_into_their_session_and_namespace() {
        assert_eq!(session_of("ns:uid:turn-3"), "ns:uid");
        assert_eq!(session_of("ns:uid"), "ns:uid");
        assert_eq!(session_of("plain"), "plain");
        assert_eq!(namespace_of("ns:uid:turn-3"), "ns");
        assert_eq!(namespace_of("plain"), "plain");
    }

    #[test]
    fn a_session_past_its_quota_is_refused_and_others_are_not() {
        let quotas = Quotas {
            session_bytes: 100,
            namespace_bytes: 150,
        };
        let mut usage = Usage::default();
        usage.add("ns:a", 60);
        let pending = Usage::default();
        assert!(usage.admit(&pending, &quotas, "ns:a:2", 40).is_ok());
        let err = usage.admit(&pending, &quotas, "ns:a:2", 41).unwrap_err();
        assert!(matches!(
            err,
            StoreError::QuotaExceeded {
                scope: "session",
                ..
            }
        ));
        assert!(usage.admit(&pending, &quotas, "ns:b", 90).is_ok());
        let err = usage.admit(&pending, &quotas, "ns:b", 91).unwrap_err();
        assert!(matches!(
            err,
            StoreError::QuotaExceeded {
                scope: "namespace",
                ..
            }
        ));
        assert!(usage.admit(&pending, &quotas, "other:b", 100).is_ok());
    }
}
