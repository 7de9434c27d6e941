//! Who may use the tier API: the session's own worker token (Secret `<session>-token`, key
//! `token`), compared in constant time, on the request's head, before any body byte is read
//! (issue 30: a slow POST with no valid token went unanswered for 12 s, and floods of them made
//! other sessions' escalations time out).
//!
//! A token check costs a Secret read from the API server, which a flood of bad tokens would turn
//! into a flood of reads. So:
//! - tokens read are kept for [`TOKEN_TTL`] (a missing Secret for [`MISSING_TTL`]), so a session
//!   that escalates reads its Secret about once per turn whatever it polls; a rotated token (a
//!   session made again under the same name) is read again on its first mismatch;
//! - each client (by source address) may fail [`FAILURES_BURST`] checks at once and
//!   [`FAILURES_PER_MINUTE`] a minute, then gets 429 with `Retry-After` before anything is read;
//! - at most [`LOOKUPS`] Secret reads run at once (the rest wait their turn).
//!
//! In memory, per replica: a bound on what one client costs, not a global count.

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// How long a token read from its Secret is used without reading it again.
pub const TOKEN_TTL: Duration = Duration::from_secs(10);
/// How long "no such Secret" is remembered.
pub const MISSING_TTL: Duration = Duration::from_secs(5);
/// Failed checks one client may make at once, and a minute after that.
pub const FAILURES_BURST: u32 = 20;
pub const FAILURES_PER_MINUTE: u32 = 60;
/// Secret reads at once.
pub const LOOKUPS: usize = 8;
/// Sessions whose token is kept; past it, the expired ones go, then the oldest.
const KEPT: usize = 4096;

/// Why a check did not pass; the tier API turns it into its HTTP answer.
#[derive(Debug)]
pub enum Refused {
    /// The client spent its failed checks; it may try again after this long (429).
    Limited(Duration),
    /// No bearer, or not the session's token (401).
    Unauthorized,
    /// The token could not be read (the API server's error).
    Lookup(kube::Error),
    /// The operator is stopping (503).
    ShuttingDown,
}

pub struct TierAuth {
    tokens: Mutex<HashMap<(String, String), Kept>>,
    /// Failed checks per client (only failures spend it).
    failures: DefaultKeyedRateLimiter<IpAddr>,
    /// Clients that spent their failures, and until when they are refused.
    refused: Mutex<HashMap<IpAddr, Instant>>,
    lookups: Semaphore,
}

#[derive(Clone)]
struct Kept {
    token: Option<Vec<u8>>,
    read_at: Instant,
}

impl Kept {
    fn fresh(&self) -> bool {
        let ttl = if self.token.is_some() {
            TOKEN_TTL
        } else {
            MISSING_TTL
        };
        self.read_at.elapsed() < ttl
    }
}

impl Default for TierAuth {
    fn default() -> Self {
        Self::new(FAILURES_PER_MINUTE, FAILURES_BURST)
    }
}

/// Where a token comes from: the API server in the operator, a fake in the unit tests.
pub trait TokenSource: Sync {
    fn token(
        &self,
        ns: &str,
        session: &str,
    ) -> impl std::future::Future<Output = Result<Option<Vec<u8>>, kube::Error>> + Send;
}

impl TokenSource for kube::Client {
    async fn token(&self, ns: &str, session: &str) -> Result<Option<Vec<u8>>, kube::Error> {
        let secrets: Api<Secret> = Api::namespaced(self.clone(), ns);
        Ok(secrets
            .get_opt(&crate::labels::token_secret(session))
            .await?
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove("token"))
            .map(|b| b.0))
    }
}

impl TierAuth {
    pub fn new(failures_per_minute: u32, failures_burst: u32) -> Self {
        let at_least_one = |n: u32| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(at_least_one(failures_per_minute))
            .allow_burst(at_least_one(failures_burst));
        TierAuth {
            tokens: Mutex::new(HashMap::new()),
            failures: DefaultKeyedRateLimiter::keyed(quota),
            refused: Mutex::new(HashMap::new()),
            lookups: Semaphore::new(LOOKUPS),
        }
    }

    /// `Ok` when `bearer` is the session's token. A client (`peer`, when known) that has spent
    /// its failed checks is refused with 429 before its token is even looked at.
    pub async fn check(
        &self,
        source: &impl TokenSource,
        peer: Option<IpAddr>,
        ns: &str,
        session: &str,
        bearer: Option<&str>,
    ) -> Result<(), Refused> {
        if let Some(wait) = peer.and_then(|p| self.refused_for(p)) {
            return Err(Refused::Limited(wait));
        }
        let ok = match bearer {
            Some(bearer) => self.matches(source, ns, session, bearer.as_bytes()).await?,
            None => false,
        };
        if ok {
            return Ok(());
        }
        if let Some(peer) = peer {
            self.failed(peer);
        }
        Err(Refused::Unauthorized)
    }

    /// How long `peer` is still refused for, if it is.
    fn refused_for(&self, peer: IpAddr) -> Option<Duration> {
        let mut refused = self.refused.lock().ok()?;
        let until = *refused.get(&peer)?;
        let now = Instant::now();
        if until > now {
            return Some(until - now);
        }
        refused.remove(&peer);
        None
    }

    /// Spends one of `peer`'s failures; past them, it is refused until its next one is due.
    fn failed(&self, peer: IpAddr) {
        if self.failures.len() > KEPT {
            self.failures.retain_recent();
        }
        if let Err(not_until) = self.failures.check_key(&peer) {
            let wait = not_until.wait_time_from(self.failures.clock().now());
            if let Ok(mut refused) = self.refused.lock() {
                if refused.len() >= KEPT {
                    let now = Instant::now();
                    refused.retain(|_, until| *until > now);
                }
                refused.insert(peer, Instant::now() + wait);
            }
        }
    }

    async fn matches(
        &self,
        source: &impl TokenSource,
        ns: &str,
        session: &str,
        bearer: &[u8],
    ) -> Result<bool, Refused> {
        let key = (ns.to_string(), session.to_string());
        let kept = self.kept(&key);
        if let Some(kept) = &kept {
            if kept.fresh() && kept.token.as_deref().is_some_and(|t| equal(t, bearer)) {
                return Ok(true);
            }
        }
        // Missing, stale, or a mismatch against a kept token (which may have been rotated):
        // read it, unless "missing" is fresh.
        if kept
            .as_ref()
            .is_some_and(|k| k.fresh() && k.token.is_none())
        {
            return Ok(false);
        }
        let _permit = self
            .lookups
            .acquire()
            .await
            .map_err(|_| Refused::ShuttingDown)?;
        let token = source.token(ns, session).await.map_err(Refused::Lookup)?;
        let ok = token.as_deref().is_some_and(|t| equal(t, bearer));
        self.keep(key, token);
        Ok(ok)
    }

    fn kept(&self, key: &(String, String)) -> Option<Kept> {
        self.tokens.lock().ok()?.get(key).cloned()
    }

    fn keep(&self, key: (String, String), token: Option<Vec<u8>>) {
        let Ok(mut tokens) = self.tokens.lock() else {
            return;
        };
        if tokens.len() >= KEPT {
            tokens.retain(|_, k| k.fresh());
        }
        if tokens.len() >= KEPT {
            if let Some(oldest) = tokens
                .iter()
                .min_by_key(|(_, k)| k.read_at)
                .map(|(key, _)| key.clone())
            {
                tokens.remove(&oldest);
            }
        }
        tokens.insert(
            key,
            Kept {
                token,
                read_at: Instant::now(),
            },
        );
    }
}

fn equal(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Secrets by session name, counting the reads.
    struct Fake {
        tokens: Mutex<HashMap<String, Vec<u8>>>,
        reads: AtomicUsize,
    }

    impl Fake {
        fn new(pairs: &[(&str, &str)]) -> Fake {
            Fake {
                tokens: Mutex::new(
                    pairs
                        .iter()
                        .map(|(s, t)| (s.to_string(), t.as_bytes().to_vec()))
                        .collect(),
                ),
                reads: AtomicUsize::new(0),
            }
        }
        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
    }

    impl TokenSource for Fake {
        async fn token(&self, _ns: &str, session: &str) -> Result<Option<Vec<u8>>, kube::Error> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.tokens.lock().unwrap().get(session).cloned())
        }
    }

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[tokio::test]
    async fn a_session_reads_its_secret_once_per_ttl_whatever_it_polls() {
        let auth = TierAuth::default();
        let fake = Fake::new(&[("a", "tok")]);
        for _ in 0..50 {
            auth.check(&fake, ip(1), "ns", "a", Some("tok"))
                .await
                .unwrap();
        }
        assert_eq!(fake.reads(), 1);
        // A missing Secret is remembered too.
        for _ in 0..5 {
            assert!(auth
                .check(&fake, ip(1), "ns", "gone", Some("tok"))
                .await
                .is_err());
        }
        assert_eq!(fake.reads(), 2);
    }

    #[tokio::test]
    async fn a_rotated_token_is_read_again_on_its_first_mismatch() {
        let auth = TierAuth::default();
        let fake = Fake::new(&[("a", "old")]);
        auth.check(&fake, ip(1), "ns", "a", Some("old"))
            .await
            .unwrap();
        fake.tokens
            .lock()
            .unwrap()
            .insert("a".into(), b"new".to_vec());
        auth.check(&fake, ip(1), "ns", "a", Some("new"))
            .await
            .unwrap();
        assert!(auth
            .check(&fake, ip(1), "ns", "a", Some("old"))
            .await
            .is_err());
        assert_eq!(fake.reads(), 3);
    }

    /// Issue 30, item 2: bad tokens from one client cost one Secret read each until its failures
    /// are spent; then 429 with a wait, and no read at all; other clients are checked as usual.
    #[tokio::test]
    async fn a_client_past_its_failures_is_refused_without_a_read() {
        let auth = TierAuth::new(60, 5);
        let fake = Fake::new(&[("a", "tok")]);
        let mut statuses = Vec::new();
        for i in 0..20 {
            let session = format!("s{i}");
            let e = auth
                .check(&fake, ip(9), "ns", &session, Some("guess"))
                .await
                .unwrap_err();
            statuses.push(match e {
                Refused::Unauthorized => 401,
                Refused::Limited(_) => 429,
                other => panic!("{other:?}"),
            });
        }
        assert_eq!(
            statuses.iter().filter(|s| **s == 401).count(),
            6,
            "{statuses:?}"
        );
        assert!(statuses[6..].iter().all(|s| *s == 429), "{statuses:?}");
        assert_eq!(fake.reads(), 6, "no Secret read once refused");
        let e = auth
            .check(&fake, ip(9), "ns", "a", Some("tok"))
            .await
            .unwrap_err();
        assert!(matches!(e, Refused::Limited(w) if w <= Duration::from_secs(1)));
        auth.check(&fake, ip(2), "ns", "a", Some("tok"))
            .await
            .unwrap();
        // No bearer at all is a failure too, and costs no read.
        assert!(auth.check(&fake, ip(3), "ns", "a", None).await.is_err());
        assert_eq!(fake.reads(), 7);
    }
}
