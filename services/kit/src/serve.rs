//! Binding and serving: graceful shutdown, and bounds on what a connection may hold.
//!
//! On SIGTERM (what Kubernetes sends) or SIGINT the server stops accepting connections and lets
//! in-flight requests finish, so an acknowledged append is never cut off mid-response by a rollout.
//!
//! Every connection costs a file descriptor, and nothing but a request should keep one: a client
//! that opens a connection and never finishes its request head (or keeps an idle connection
//! forever) must not be able to take descriptors from real requests. [`serve_with`] serves
//! HTTP/1.1 with the bounds of [`ConnectionLimits`], the way Go's `net/http` times connections:
//!
//! - **header read timeout**: a request head must be complete within this long of the connection
//!   opening, or of the first byte of the request on a kept-alive connection; otherwise the
//!   connection is closed (nothing is answered: no request was read);
//! - **idle timeout**: a kept-alive connection with no request in flight is closed after this long
//!   without a byte from the client;
//! - **connections per source address**: at most
//!   [`ConnectionLimits::max_connections_per_source`] from one address (a share of the limit,
//!   [`crate::clients`]). Past it, a new connection from that address closes the address's own
//!   longest-waiting idle, half-sent or dripping connection by the rule below, or, when all of them
//!   are answering requests, is answered 429 with `Retry-After` and closed: a client's flood takes
//!   its own connections, never another client's (issue 30);
//! - **max connections**: at most this many connections are open. Accepting one more closes the
//!   longest-waiting connection that is not answering a request (one still reading a head, or
//!   idle); if there is none, the one still sending a request body whose handler has not acted
//!   (its body not read to the end) that has been silent longest; when every open connection is
//!   answering a request whose body is in, new ones wait in the accept backlog until one
//!   finishes. So a client holding the maximum number of idle, half-sent or dripping connections
//!   delays nobody (issue 29: slow `/v1/exec` bodies held every slot, and `/readyz` went
//!   unanswered): each real request takes the slot of one of them. Among equals, the connection
//!   of the address holding the most goes first.
//!
//! - **requests per second per source address**: past
//!   [`ConnectionLimits::max_request_rate_per_source`] (a burst of twice that), a request is
//!   answered 429 and its connection closed before the router sees it (`rate.rs`; loopback is
//!   never limited);
//! - **send timeout**: a connection whose writes have been blocked (its client not reading its
//!   answers) for [`ConnectionLimits::send_timeout`] is closed, whatever its phase; at the limit,
//!   when no connection above is left to close, the one blocked longest makes room (issue 30: a
//!   tenant's pods pipelined requests and never read the answers, so every slot was busy for as
//!   long as they liked, and the liveness probe could not connect).
//!
//! A request whose head has arrived is answered, however long its handler takes: handlers bound
//! their own work (body sizes, command timeouts), and every body keeps the pace of
//! [`ConnectionLimits::body`], which the server stamps on each request ([`RequestTiming`],
//! enforced by the readers of [`crate::body`]), beside the bound of requests in flight per client
//! identity ([`RequestsPerClient`], which a service applies once it knows who asks).

mod rate;
mod refuse;

use crate::body::{BodyPace, RequestTiming};
use crate::clients::{default_share, RequestsPerClient, DEFAULT_MAX_REQUESTS_PER_CLIENT};
use axum::Router;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Defaults of [`ConnectionLimits::header_read_timeout`], [`ConnectionLimits::idle_timeout`] and
/// [`ConnectionLimits::max_connections`], defined with the bounds a worker's settings share.
pub use kube_harness_bounds::connection::{
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
/// Default [`ConnectionLimits::max_request_rate_per_source`]: 200 requests a second (a burst of
/// 400): far above what a worker asks of a shared service, far below what a flood sends.
pub const DEFAULT_MAX_REQUEST_RATE_PER_SOURCE: u32 = 200;
/// Default [`ConnectionLimits::send_timeout`]: 30 s without a write going through.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// What one client connection may hold; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request head may take to arrive, from the connection opening or from the first
    /// byte of a request on a kept-alive connection.
    pub header_read_timeout: Duration,
    /// How long a connection with no request in flight may stay silent.
    pub idle_timeout: Duration,
    /// The most connections open at once; [`ConnectionLimits::effective_max_connections`] lowers
    /// it to half the open-file limit.
    pub max_connections: usize,
    /// How every request body must keep coming once its head has arrived (408 otherwise).
    pub body: BodyPace,
    /// The most connections one source address may hold; `None`:
    /// [`default_share`] of the effective connection limit.
    pub max_connections_per_source: Option<usize>,
    /// The most requests one client identity may have in flight, where the service tells
    /// identities apart ([`RequestsPerClient`]; 429 past it).
    pub max_requests_per_client: usize,
    /// How long a connection's writes may stay blocked (its client not reading) before it is
    /// closed.
    pub send_timeout: Duration,
    /// Requests a second one source address may send (twice that in a burst); 0: no limit.
    pub max_request_rate_per_source: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            body: BodyPace::default(),
            max_connections_per_source: None,
            max_requests_per_client: DEFAULT_MAX_REQUESTS_PER_CLIENT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_request_rate_per_source: DEFAULT_MAX_REQUEST_RATE_PER_SOURCE,
        }
    }
}

impl ConnectionLimits {
    /// Rejects zero timeouts and a zero connection limit (each would refuse every request).
    pub fn validate(&self) -> Result<(), String> {
        if self.header_read_timeout.is_zero()
            || self.idle_timeout.is_zero()
            || self.send_timeout.is_zero()
        {
            return Err("the header read and idle timeouts must be above zero".into());
        }
        if self.max_connections == 0
            || self.max_connections_per_source == Some(0)
            || self.max_requests_per_client == 0
        {
            return Err(
                "the connection limits and the requests per client must be at least 1".into(),
            );
        }
        self.body.validate()
    }

    /// `max_connections`, but at most half of the process's open-file limit (`RLIMIT_NOFILE`), so
    /// that connections alone can never exhaust the descriptors the rest of the process needs
    /// (store files, commands' pipes, outgoing connections).
    pub fn effective_max_connections(&self) -> usize {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        let cap = if !ok || limit.rlim_cur == libc::RLIM_INFINITY {
            usize::MAX
        } else {
            usize::try_from(limit.rlim_cur / 2).unwrap_or(usize::MAX)
        };
        self.max_connections.min(cap).max(1)
    }

    /// The connections one source address may hold, at most the effective limit.
    pub fn effective_per_source(&self) -> usize {
        let max = self.effective_max_connections();
        self.max_connections_per_source
            .unwrap_or_else(|| default_share(max))
            .clamp(1, max)
    }
}

/// Command-line flags for [`ConnectionLimits`], for a service's `serve` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Seconds a client has to send a request's head (from connecting, or from the first byte of
    /// a request on a kept-alive connection); then the connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT.as_secs())]
    pub header_read_timeout: u64,
    /// Seconds a kept-alive connection with no request in flight may stay silent.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs())]
    pub idle_timeout: u64,
    /// Most client connections open at once (at most half the open-file limit). At the limit a
    /// new connection closes the longest-waiting idle or half-sent one; when all are answering
    /// requests, it waits.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Most connections from one source address (default: an eighth of --max-connections, at
    /// least 64 or the limit). Past it the address's own idle or slow connections make room, or
    /// the new one is answered 429.
    #[arg(long, value_name = "N")]
    pub max_connections_per_source: Option<usize>,
    /// Most requests one client identity (where the service can tell one, e.g. the session
    /// log's token scope) may have in flight; past it, 429 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REQUESTS_PER_CLIENT)]
    pub max_requests_per_client: usize,
    /// Requests a second one source address may send (twice that in a burst; loopback is not
    /// limited); past it, 429 and the connection is closed. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REQUEST_RATE_PER_SOURCE)]
    pub max_request_rate_per_source: u32,
}

impl Default for ConnectionArgs {
    fn default() -> Self {
        ConnectionArgs::from(ConnectionLimits::default())
    }
}

impl From<ConnectionLimits> for ConnectionArgs {
    fn from(limits: ConnectionLimits) -> Self {
        ConnectionArgs {
            header_read_timeout: limits.header_read_timeout.as_secs(),
            idle_timeout: limits.idle_timeout.as_secs(),
            max_connections: limits.max_connections,
            max_connections_per_source: limits.max_connections_per_source,
            max_requests_per_client: limits.max_requests_per_client,
            max_request_rate_per_source: limits.max_request_rate_per_source,
        }
    }
}

impl ConnectionArgs {
    /// The limits these flags name; zero timeouts or a zero limit are refused.
    pub fn limits(&self) -> anyhow::Result<ConnectionLimits> {
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            max_connections: self.max_connections,
            max_connections_per_source: self.max_connections_per_source,
            max_requests_per_client: self.max_requests_per_client,
            max_request_rate_per_source: self.max_request_rate_per_source,
            ..ConnectionLimits::default()
        };
        limits.validate().map_err(|e| {
            anyhow::anyhow!("--header-read-timeout, --idle-timeout, --max-connections, --max-connections-per-source, --max-requests-per-client: {e}")
        })?;
        Ok(limits)
    }
}

/// Binds `addr` with SO_REUSEADDR, so a restarted server can take its port back at once.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves `router` on `listener` with the default [`ConnectionLimits`] until `shutdown`
/// completes, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, ConnectionLimits::default(), shutdown).await
}

/// Serves `router` (HTTP/1.1) on `listener` within `limits` until `shutdown` completes; then
/// stops accepting, closes the connections that are not answering a request, lets the others
/// finish their request, and returns when all are closed.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    limits
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let max = limits.effective_max_connections();
    let per_source = limits.effective_per_source();
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(
            %addr,
            max_connections = max,
            max_connections_per_source = per_source,
            max_requests_per_client = limits.max_requests_per_client,
            header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
            idle_timeout_ms = limits.idle_timeout.as_millis() as u64,
            "listening"
        );
    }
    if max < limits.max_connections {
        tracing::warn!(
            configured = limits.max_connections,
            effective = max,
            "connection limit lowered to half the open-file limit (RLIMIT_NOFILE)"
        );
    }
    let shared = Arc::new(Shared {
        limits,
        max,
        per_source,
        conns: Mutex::new(Conns::default()),
        changed: Notify::new(),
        next_id: AtomicU64::new(0),
        last_warning: Mutex::new(None),
        refusals: refuse::Refusals::default(),
        rate: rate::SourceRate::new(limits.max_request_rate_per_source).map(Arc::new),
    });
    let clients = RequestsPerClient::new(limits.max_requests_per_client);
    let (stop_tx, stop_rx) = watch::channel(false);
    let signal = tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut stop = stop_rx.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => (stream, peer),
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of descriptors (EMFILE) or another resource: back off, then try again.
                    tracing::error!("accept error: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(250)) => continue,
                        _ = stopped(&mut stop) => break,
                    }
                }
            },
            _ = stopped(&mut stop) => break,
        };
        let source = peer.ip().to_canonical();
        if !room_for_source(&shared, source) {
            shared.refusals.refuse(stream, source);
            continue;
        }
        if !make_room(&shared, &mut stop).await {
            break;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(source));
        lock(&shared.conns).insert(id, conn.clone());
        tokio::spawn(run_connection(
            shared.clone(),
            id,
            conn,
            (stream, peer),
            router.clone(),
            clients.clone(),
            stop_rx.clone(),
        ));
    }
    // New connections are refused from here; open ones close as their requests finish.
    drop(listener);
    signal.abort();
    loop {
        let changed = shared.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if lock(&shared.conns).by_id.is_empty() {
            break;
        }
        changed.await;
    }
    Ok(())
}

/// Completes when the shutdown signal has fired (at once if it already has).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        // The signal task is gone without firing: never.
        std::future::pending::<()>().await;
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Before a new connection from `source` is served: below the address's share, nothing to do;
/// at it, close the address's own connection that loses least ([`Track::eviction_rank`]) and
/// go on (it closes at once). `false` when every connection of the address is answering a
/// request: the new one is refused (never waited for: the accept loop serves everyone). A share
/// as large as the limit is no share: the limit's own rule (wait for a slot) applies.
fn room_for_source(shared: &Shared, source: IpAddr) -> bool {
    if shared.per_source >= shared.max {
        return true;
    }
    let victim = {
        let mut conns = lock(&shared.conns);
        if conns.of(source) < shared.per_source {
            return true;
        }
        let own = conns
            .by_id
            .values()
            .filter(|c| c.source == source && !c.evicting.load(Ordering::Acquire));
        let victim = match own
            .filter_map(|c| Some((c.track().eviction_rank()?, c.clone())))
            .min_by_key(|(rank, _)| *rank)
        {
            Some((_, victim)) => victim,
            None => return false,
        };
        // Counted out at once, so the next connection of the address picks another.
        conns.leaving(&victim);
        victim
    };
    shared.warn_source_full(source);
    victim.evict.notify_one();
    true
}

/// Before a new connection is served: below the limit, nothing to do; at it, close the
/// connection that loses least ([`Track::eviction_rank`]; among equals, one of the address
/// holding the most), or wait for one to close. `false` when shutdown came first.
async fn make_room(shared: &Shared, stop: &mut watch::Receiver<bool>) -> bool {
    loop {
        let changed = shared.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let victim = {
            let conns = lock(&shared.conns);
            if conns.by_id.len() < shared.max {
                return true;
            }
            conns
                .by_id
                .values()
                .filter_map(|c| {
                    let (class, since) = c.track().eviction_rank()?;
                    let held = std::cmp::Reverse(conns.of(c.source));
                    Some(((class, held, since), c.clone()))
                })
                .min_by_key(|(rank, _)| *rank)
                .map(|(_, c)| c)
        };
        if let Some(victim) = victim {
            shared.warn_full();
            victim.evict.notify_one();
        }
        // A closed connection (or a refused eviction) wakes us; the timer is a backstop.
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stopped(stop) => return false,
        }
    }
}

struct Shared {
    limits: ConnectionLimits,
    max: usize,
    per_source: usize,
    conns: Mutex<Conns>,
    /// Notified when a connection closes or refuses to be evicted.
    changed: Notify,
    next_id: AtomicU64,
    last_warning: Mutex<Option<Instant>>,
    refusals: refuse::Refusals,
    rate: Option<Arc<rate::SourceRate>>,
}

/// The open connections, and how many each source address holds.
#[derive(Default)]
struct Conns {
    by_id: HashMap<u64, Arc<Conn>>,
    per_source: HashMap<IpAddr, usize>,
}

impl Conns {
    fn insert(&mut self, id: u64, conn: Arc<Conn>) {
        *self.per_source.entry(conn.source).or_insert(0) += 1;
        self.by_id.insert(id, conn);
    }

    fn remove(&mut self, id: u64) {
        if let Some(conn) = self.by_id.remove(&id) {
            if !conn.evicting.load(Ordering::Acquire) {
                self.uncount(conn.source);
            }
        }
    }

    /// `conn` was asked to make room for its address: no longer counted in its share.
    fn leaving(&mut self, conn: &Conn) {
        if !conn.evicting.swap(true, Ordering::AcqRel) {
            self.uncount(conn.source);
        }
    }

    /// `conn` refused to leave (a request came in meanwhile): counted again.
    fn staying(&mut self, conn: &Conn) {
        if conn.evicting.swap(false, Ordering::AcqRel) {
            *self.per_source.entry(conn.source).or_insert(0) += 1;
        }
    }

    fn uncount(&mut self, source: IpAddr) {
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }

    fn of(&self, source: IpAddr) -> usize {
        self.per_source.get(&source).copied().unwrap_or(0)
    }
}

impl Shared {
    /// Logs that the limit was reached, at most once every 10 s.
    fn warn_full(&self) {
        if self.may_warn() {
            tracing::warn!(
                max_connections = self.max,
                "connection limit reached: closing the longest-waiting idle or half-sent connections to make room"
            );
        }
    }

    /// Logs that an address reached its share, at most once every 10 s.
    fn warn_source_full(&self, source: IpAddr) {
        if self.may_warn() {
            tracing::warn!(
                %source,
                max_connections_per_source = self.per_source,
                "an address holds its share of connections: its own longest-waiting connection makes room"
            );
        }
    }

    fn may_warn(&self) -> bool {
        let mut last = lock(&self.last_warning);
        let due = last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head: since the connection opened, or since the first byte of a
    /// request arrived on an idle connection.
    Head,
    /// At least one request is being answered (its response body not yet handed over).
    Busy,
    /// Kept alive between requests, since the last response was handed over.
    Idle,
}

#[derive(Debug, Clone, Copy)]
struct Track {
    phase: Phase,
    since: Instant,
    in_flight: usize,
    /// Requests in flight whose body has not been read to its end (or dropped): their handlers
    /// have not acted on them yet.
    receiving: usize,
    /// When the client last sent a byte.
    last_read: Instant,
    /// Since when writes to the socket have not gone through (the client is not reading):
    /// bytes of a response may still be waiting in the connection's buffer.
    write_blocked: Option<Instant>,
}

impl Track {
    /// Closing now loses nothing that was answered: no request in flight, no response bytes
    /// left to write (what shutdown closes at once).
    fn evictable(&self) -> bool {
        self.phase != Phase::Busy && self.write_blocked.is_none()
    }

    /// Which connection makes room for a new one, lowest first; `None` for one that must not
    /// be closed. First a connection with no request in flight (reading a head, or idle), the
    /// longest-waiting; then one whose every request is still sending its body (no handler has
    /// acted: a body is read whole before anything is done with it), the one silent longest
    /// (a dripping client before a fast upload).
    fn eviction_rank(&self) -> Option<(u8, Instant)> {
        if self.evictable() {
            return Some((0, self.since));
        }
        let all_receiving = self.in_flight > 0 && self.receiving >= self.in_flight;
        if let Some(blocked) = self.write_blocked {
            // Its client stopped reading: it loses what it did not read (an answered append
            // is in the store; a retry with its key gets it back).
            return Some((2, blocked));
        }
        all_receiving.then_some((1, self.last_read))
    }

    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let phase = match self.phase {
            Phase::Head => Some(self.since + limits.header_read_timeout),
            Phase::Idle => Some(self.since + limits.idle_timeout),
            Phase::Busy => None,
        };
        let send = self.write_blocked.map(|since| since + limits.send_timeout);
        match (phase, send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

struct Conn {
    /// The client's address (IPv4-mapped IPv6 as IPv4).
    source: IpAddr,
    /// Asked to make room for a new connection of its address ([`Conns::leaving`]).
    evicting: std::sync::atomic::AtomicBool,
    track: Mutex<Track>,
    /// Asks the connection to close if it is evictable.
    evict: Notify,
    /// The deadline moved (a phase began): the connection's timer must be set again.
    retimed: Notify,
}

impl Conn {
    fn new(source: IpAddr) -> Self {
        Conn {
            source,
            evicting: std::sync::atomic::AtomicBool::new(false),
            track: Mutex::new(Track {
                phase: Phase::Head,
                since: Instant::now(),
                in_flight: 0,
                receiving: 0,
                last_read: Instant::now(),
                write_blocked: None,
            }),
            evict: Notify::new(),
            retimed: Notify::new(),
        }
    }

    fn track(&self) -> Track {
        *lock(&self.track)
    }

    fn on_bytes_read(&self) {
        let mut track = lock(&self.track);
        track.last_read = Instant::now();
        if track.phase == Phase::Idle {
            track.phase = Phase::Head;
            track.since = Instant::now();
            self.retimed.notify_one();
        }
    }

    fn on_write(&self, blocked: bool) {
        let mut track = lock(&self.track);
        match (blocked, track.write_blocked) {
            (true, None) => {
                track.write_blocked = Some(Instant::now());
                // A deadline begins: the connection's timer must be set again.
                self.retimed.notify_one();
            }
            (false, Some(_)) => track.write_blocked = None,
            _ => {}
        }
    }

    /// Marks a request in flight; returns when it began: the first byte of its head (the
    /// connection's opening, or the first byte after it was idle).
    fn begin_request(&self) -> Instant {
        let mut track = lock(&self.track);
        let started = match track.phase {
            Phase::Head => track.since,
            Phase::Busy | Phase::Idle => Instant::now(),
        };
        track.in_flight += 1;
        track.phase = Phase::Busy;
        started
    }

    fn begin_receiving(&self) {
        lock(&self.track).receiving += 1;
    }

    fn end_receiving(&self) {
        let mut track = lock(&self.track);
        track.receiving = track.receiving.saturating_sub(1);
    }

    fn end_request(&self) {
        let mut track = lock(&self.track);
        track.in_flight = track.in_flight.saturating_sub(1);
        if track.in_flight == 0 {
            track.phase = Phase::Idle;
            track.since = Instant::now();
            self.retimed.notify_one();
        }
    }
}

/// Serves one connection until it ends, times out, is evicted, or (after shutdown) finishes
/// its request.
async fn run_connection(
    shared: Arc<Shared>,
    id: u64,
    conn: Arc<Conn>,
    (stream, peer): (TcpStream, std::net::SocketAddr),
    router: Router,
    clients: RequestsPerClient,
    mut stop: watch::Receiver<bool>,
) {
    // Unregisters the connection however this task ends.
    struct Registered(Arc<Shared>, u64);
    impl Drop for Registered {
        fn drop(&mut self) {
            lock(&self.0.conns).remove(self.1);
            self.0.changed.notify_waiters();
        }
    }
    let _registered = Registered(shared.clone(), id);
    let limits = shared.limits;
    let io = hyper_util::rt::TokioIo::new(Tracked {
        inner: stream,
        conn: conn.clone(),
    });
    let service = ConnService {
        router,
        conn: conn.clone(),
        pace: limits.body,
        clients,
        peer,
        rate: shared.rate.clone(),
    };
    let http = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(http);
    // A busy connection has no deadline; it is looked at again when it goes idle (`retimed`),
    // and after this long as a backstop.
    let recheck = limits.header_read_timeout.min(limits.idle_timeout);
    let mut shutting_down = false;
    loop {
        let track = conn.track();
        let wake = track
            .deadline(&limits)
            .unwrap_or_else(|| Instant::now() + recheck);
        tokio::select! {
            served = http.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            _ = tokio::time::sleep_until(wake) => {
                let track = conn.track();
                if track.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!(phase = ?track.phase, "closing a connection: timed out");
                    return;
                }
            }
            _ = conn.retimed.notified() => {}
            _ = conn.evict.notified() => {
                if conn.track().eviction_rank().is_some() {
                    tracing::debug!("closing a connection to make room");
                    return;
                }
                // Busy again: let the acceptor pick another.
                lock(&shared.conns).staying(&conn);
                shared.changed.notify_waiters();
            }
            _ = stopped(&mut stop), if !shutting_down => {
                shutting_down = true;
                if conn.track().evictable() {
                    return;
                }
                http.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The socket, telling its connection's [`Track`] about bytes read and writes blocked.
struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.on_bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.conn.on_write(polled.is_pending());
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.conn.on_write(polled.is_pending());
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router, marking its connection busy from a request's head until its response body is
/// handed over (or dropped), and receiving until the request's body is read to its end; every
/// request carries its [`RequestTiming`] and the server's [`RequestsPerClient`].
#[derive(Clone)]
struct ConnService {
    router: Router,
    conn: Arc<Conn>,
    pace: BodyPace,
    clients: RequestsPerClient,
    /// The client's address, for handlers that key on it (`ConnectInfo<SocketAddr>`, as
    /// axum's own `into_make_service_with_connect_info` would give them).
    peer: std::net::SocketAddr,
    rate: Option<Arc<rate::SourceRate>>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for ConnService {
    type Response = axum::http::Response<TrackedBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, request: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        let started = self.conn.begin_request();
        let guard = InFlight(self.conn.clone());
        if let Some(rate) = &self.rate {
            if !rate.admit(self.conn.source) {
                let refused = rate::refusal(rate.per_second());
                return Box::pin(async move {
                    Ok(refused.map(|body| TrackedBody {
                        body,
                        _in_flight: guard,
                    }))
                });
            }
        }
        let mut router = self.router.clone();
        let conn = self.conn.clone();
        let mut request = request.map(|body| axum::body::Body::new(ReceivingBody::new(body, conn)));
        request.extensions_mut().insert(RequestTiming {
            started,
            head_done: Instant::now(),
            pace: self.pace,
        });
        request.extensions_mut().insert(self.clients.clone());
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        Box::pin(async move {
            // A Router is always ready (axum documents it), so `call` needs no `poll_ready`.
            let response = tower_service::Service::call(&mut router, request).await?;
            Ok(response.map(|body| TrackedBody {
                body,
                _in_flight: guard,
            }))
        })
    }
}

/// A request's body, telling its connection when it has been read to its end (or failed, or
/// was dropped unread): until then the request's handler has not acted on it, and the
/// connection may be closed to make room ([`Track::eviction_rank`]).
struct ReceivingBody {
    inner: hyper::body::Incoming,
    conn: Option<Arc<Conn>>,
}

impl ReceivingBody {
    fn new(inner: hyper::body::Incoming, conn: Arc<Conn>) -> Self {
        use http_body::Body as _;
        let conn = (!inner.is_end_stream()).then(|| {
            conn.begin_receiving();
            conn
        });
        ReceivingBody { inner, conn }
    }

    fn done(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.end_receiving();
        }
    }
}

impl Drop for ReceivingBody {
    fn drop(&mut self) {
        self.done();
    }
}

impl http_body::Body for ReceivingBody {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// One request in flight; its drop ends the request.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end_request();
    }
}

/// A response body that keeps its request in flight until it is dropped.
struct TrackedBody {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Completes on the first SIGTERM or SIGINT. Used by every server and the operator.
///
/// A handler that cannot be installed is logged as an error and that signal is not waited for;
/// the other still stops the process. If neither can be installed this never completes (the pod
/// is then stopped by SIGKILL after its grace period), rather than completing at once and
/// shutting a healthy process down.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot install the SIGTERM handler: {e}; only SIGINT will stop");
                std::future::pending::<()>().await;
            }
        }
    };
    let int = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot install the SIGINT handler: {e}; only SIGTERM will stop");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received, shutting down"),
        _ = int => tracing::info!("SIGINT received, shutting down"),
    }
}
