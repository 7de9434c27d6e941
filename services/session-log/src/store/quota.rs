//! Byte quotas per session and per namespace: what one tenant may store, so that one session's
//! appends cannot fill the disk (or, for the memory store, the memory) every other session uses.
//!
//! A run id `NAMESPACE:UID[:…]` belongs to session `NAMESPACE:UID` (the scope of its session's
//! token, `scope.rs`) and to namespace `NAMESPACE`; a run id without `:` is its own session and
//! namespace. The bytes counted are the canonical JSON of the stored events (what a read returns),
//! summed over every run of the session or namespace, each event counting at least
//! [`MIN_EVENT_BYTES`]. They are rebuilt from the stored events when a store opens. A leaf: the
//! stores use it, it uses nothing of theirs.

use super::types::StoreError;
use std::collections::HashMap;

/// Default most bytes of events one session (all its runs) may store.
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 256 * 1024 * 1024;
/// Default most bytes of events one namespace (all its sessions) may store.
pub const DEFAULT_MAX_NAMESPACE_BYTES: u64 = 1024 * 1024 * 1024;

/// What an event counts at least: the file store's index holds about 110 bytes per event in
/// memory whatever its size, so a flood of tiny events must use up a quota too (a session's
/// 256 MiB then holds at most 262,144 events, about 29 MiB of index).
pub const MIN_EVENT_BYTES: u64 = 1024;

/// What an event of `bytes` counts against the quotas.
pub fn charge(bytes: u64) -> u64 {
    bytes.max(MIN_EVENT_BYTES)
}

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
    /// Counts an event of `bytes` (charged at least [`MIN_EVENT_BYTES`]).
    pub fn add(&mut self, run: &str, bytes: u64) {
        add_to(&mut self.sessions, session_of(run), charge(bytes));
        add_to(&mut self.namespaces, namespace_of(run), charge(bytes));
    }

    /// Counts bytes already charged (a PostgreSQL run row's total).
    pub fn add_charged(&mut self, run: &str, charged: u64) {
        add_to(&mut self.sessions, session_of(run), charged);
        add_to(&mut self.namespaces, namespace_of(run), charged);
    }

    pub fn session(&self, run: &str) -> u64 {
        self.sessions.get(session_of(run)).copied().unwrap_or(0)
    }

    pub fn namespace(&self, run: &str) -> u64 {
        self.namespaces.get(namespace_of(run)).copied().unwrap_or(0)
    }

    /// Whether an event of `bytes` more for `run` stays within `quotas`, counting what is stored (`self`) and
    /// what is planned but not yet committed (`pending`).
    pub fn admit(
        &self,
        pending: &Usage,
        quotas: &Quotas,
        run: &str,
        bytes: u64,
    ) -> Result<(), StoreError> {
        let bytes = charge(bytes);
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
        let m = MIN_EVENT_BYTES;
        let quotas = Quotas {
            session_bytes: 100 + 2 * m,
            namespace_bytes: 150 + 3 * m,
        };
        let pending = Usage::default();
        let refused = |usage: &Usage, run: &str, bytes: u64| match usage
            .admit(&pending, &quotas, run, bytes)
        {
            Ok(()) => None,
            Err(StoreError::QuotaExceeded { scope, .. }) => Some(scope),
            Err(e) => panic!("{e}"),
        };
        let mut usage = Usage::default();
        usage.add_charged("ns:a", 60);
        assert_eq!(refused(&usage, "ns:a:2", 40 + 2 * m), None);
        assert_eq!(refused(&usage, "ns:a:2", 41 + 2 * m), Some("session"));
        assert_eq!(refused(&usage, "other:b", 100), None);
        let mut usage = Usage::default();
        usage.add_charged("ns:x", 60 + m);
        assert_eq!(refused(&usage, "ns:b", 90 + 2 * m), None);
        assert_eq!(refused(&usage, "ns:b", 91 + 2 * m), Some("namespace"));
    }

    #[test]
    fn tiny_events_count_at_least_the_minimum() {
        let quotas = Quotas {
            session_bytes: 3 * MIN_EVENT_BYTES,
            namespace_bytes: u64::MAX,
        };
        let mut usage = Usage::default();
        for _ in 0..3 {
            usage.admit(&Usage::default(), &quotas, "ns:a", 10).unwrap();
            usage.add("ns:a", 10);
        }
        assert!(usage.admit(&Usage::default(), &quotas, "ns:a", 10).is_err());
    }
}
