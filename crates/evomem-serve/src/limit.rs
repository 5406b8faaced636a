//! Per-key rate limiting: a token bucket per API key hash, refilled at
//! `rate_per_s` with a burst of `burst`. In memory, per process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Token buckets by key.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `rate_per_s <= 0` disables limiting.
    pub fn new(rate_per_s: f64, burst: f64) -> Self {
        Self {
            rate: rate_per_s,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one token for `key`; `Err(ms)` says when the next one is due.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        self.check_at(key, Instant::now(), 1.0)
    }

    /// Take `cost` tokens for `key` (a batch pays per entry); a cost above
    /// the burst is charged as the whole burst, so that the largest batch
    /// allowed can still pass. `Err(ms)` says when they are due; nothing is
    /// taken then.
    pub fn check_cost(&self, key: &str, cost: f64) -> Result<(), u64> {
        self.check_at(key, Instant::now(), cost)
    }

    fn check_at(&self, key: &str, now: Instant, cost: f64) -> Result<(), u64> {
        let cost = cost.clamp(0.0, self.burst);
        if self.rate <= 0.0 {
            return Ok(());
        }
        let mut map = match self.buckets.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let b = map.entry(key.to_string()).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        let dt = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + dt * self.rate).min(self.burst);
        b.last = now;
        if b.tokens >= cost {
            b.tokens -= cost;
            Ok(())
        } else {
            Err((((cost - b.tokens) / self.rate) * 1000.0).ceil() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_refill_per_key() {
        let r = RateLimiter::new(10.0, 3.0);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(r.check_at("a", t0, 1.0).is_ok());
        }
        let wait = r.check_at("a", t0, 1.0).unwrap_err();
        assert!((90..=100).contains(&wait), "{wait}");
        assert!(
            r.check_at("b", t0, 1.0).is_ok(),
            "keys have their own buckets"
        );
        assert!(r
            .check_at("a", t0 + Duration::from_millis(100), 1.0)
            .is_ok());
    }

    #[test]
    fn a_batch_pays_per_entry() {
        let r = RateLimiter::new(10.0, 100.0);
        let t0 = Instant::now();
        assert!(r.check_at("a", t0, 60.0).is_ok());
        let wait = r.check_at("a", t0, 60.0).unwrap_err();
        assert!((1900..=2000).contains(&wait), "{wait}");
        assert!(
            r.check_at("a", t0, 40.0).is_ok(),
            "a refused batch took nothing"
        );
        assert!(r.check_at("a", t0, 1.0).is_err(), "the bucket is empty");
    }
}
