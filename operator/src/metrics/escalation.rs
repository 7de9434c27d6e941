//! Timing escalations: when this replica opened each Tier-1 sandbox not yet answered Ready, and
//! the pods already observed, so that an escalation is observed once however often its Ready is
//! answered. Its memory is bounded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Pods remembered as observed (the oldest are forgotten beyond; a worker stops asking once its
/// sandbox is Ready, so only repeats within seconds matter).
pub(super) const OBSERVED_KEPT: usize = 4096;
/// Opens never answered Ready are forgotten after this long (the sweep ends a pod still not
/// ready after 30 minutes) or beyond [`OBSERVED_KEPT`] of them.
const OPEN_FORGOTTEN: Duration = Duration::from_secs(3600);

/// When this replica opened each Tier-1 sandbox not yet answered Ready, and the pods already
/// observed.
#[derive(Default)]
pub(super) struct EscalationClock {
    pub(super) opened: HashMap<String, Instant>,
    pub(super) observed: VecDeque<String>,
    pub(super) observed_set: HashSet<String>,
}

impl EscalationClock {
    /// The sandbox on the pod with this uid was opened at `now`.
    pub(super) fn opened(&mut self, pod_uid: &str, now: Instant) {
        if self.opened.len() >= OBSERVED_KEPT {
            self.opened
                .retain(|_, at| now.duration_since(*at) < OPEN_FORGOTTEN);
            if self.opened.len() >= OBSERVED_KEPT {
                self.opened.clear();
            }
        }
        self.opened.insert(pod_uid.to_string(), now);
    }

    /// The seconds the pod's escalation took, the first time it is answered Ready: since its
    /// open here, else `created_ago` (a finite, non-negative number of seconds). `None` when it
    /// was observed already or there is nothing to time it from.
    pub(super) fn ready(&mut self, pod_uid: &str, created_ago: Option<f64>) -> Option<f64> {
        if self.observed_set.contains(pod_uid) {
            return None;
        }
        let seconds = match self.opened.remove(pod_uid) {
            Some(at) => at.elapsed().as_secs_f64(),
            None => match created_ago {
                Some(s) if s.is_finite() && s >= 0.0 => s,
                _ => return None,
            },
        };
        if self.observed.len() >= OBSERVED_KEPT {
            if let Some(old) = self.observed.pop_front() {
                self.observed_set.remove(&old);
            }
        }
        self.observed.push_back(pod_uid.to_string());
        self.observed_set.insert(pod_uid.to_string());
        Some(seconds)
    }
}
