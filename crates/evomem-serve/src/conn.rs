//! Connection limits, so that idle or slow connections cannot take every
//! file descriptor, every byte of memory or every slot:
//!
//! - at most `serve.max_connections` open at once; further connections
//!   wait in the kernel's accept queue;
//! - at most `serve.max_connections_per_address` open from one IP address;
//!   a connection past it is closed as soon as it is accepted, so one
//!   client cannot take every slot;
//! - a connection with no request running is closed once it has been idle
//!   for `serve.idle_timeout_s`, or once `serve.header_timeout_s` passed
//!   since the first byte of a request that has not started (a request
//!   head sent slowly, byte by byte, holds a slot no longer than that).
//!
//! Which requests run is told by [`busy`], a middleware that counts the
//! requests of each connection while they run (from the connection's
//! [`Conn`], its `ConnectInfo`); between requests the connection's reads
//! carry the deadline, and a read past it ends the connection (an end of
//! file, which the HTTP server answers by closing it). Writes (a response
//! still being sent) push the deadline back.

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::IncomingStream;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The limits of [`LimitedListener`] (module docs).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max: usize,
    /// Connections open at once from one IP address.
    pub per_address: usize,
    /// From the first byte of a request that has not started.
    pub header_timeout: Duration,
    /// With no request running and nothing read.
    pub idle_timeout: Duration,
}

/// A TCP listener with the limits of the module docs.
pub struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    by_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
    limits: Limits,
}

impl LimitedListener {
    /// `inner` under `limits`.
    pub fn new(inner: TcpListener, limits: Limits) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(limits.max.max(1))),
            by_address: Arc::default(),
            limits,
        }
    }

    /// Take a slot of `ip`, or `None` when it has `per_address` already.
    fn slot(&self, ip: IpAddr) -> Option<AddressSlot> {
        let mut open = crate::lock(&self.by_address);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.limits.per_address.max(1) {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            ip,
            open: self.by_address.clone(),
        })
    }
}

/// One connection's place in its address's count; given back on drop.
struct AddressSlot {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = crate::lock(&self.open);
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What [`busy`] and the connection share: the requests running, and how
/// many have ended (each end starts an idle period).
#[derive(Debug, Default)]
pub struct Activity {
    running: AtomicUsize,
    ended: AtomicU64,
}

/// A connection's `ConnectInfo`: its [`Activity`].
#[derive(Debug, Clone)]
pub struct Conn {
    activity: Arc<Activity>,
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, LimitedListener>> for Conn {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> Self {
        Conn {
            activity: stream.io().activity.clone(),
        }
    }
}

/// Counts a request as running on its connection until its answer is
/// made (module docs); a request without a [`Conn`] (a test calling the
/// router directly) passes through.
pub async fn busy(req: Request, next: Next) -> Response {
    let Some(ConnectInfo(conn)) = req.extensions().get::<ConnectInfo<Conn>>().cloned() else {
        return next.run(req).await;
    };
    struct Running(Arc<Activity>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.ended.fetch_add(1, Ordering::SeqCst);
            self.0.running.fetch_sub(1, Ordering::SeqCst);
        }
    }
    conn.activity.running.fetch_add(1, Ordering::SeqCst);
    let _running = Running(conn.activity);
    next.run(req).await
}

/// An accepted connection; gives its slots back when closed.
pub struct Limited {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
    _slot: AddressSlot,
    activity: Arc<Activity>,
    limits: Limits,
    /// When the connection ends unless a request starts first.
    deadline: Pin<Box<Sleep>>,
    /// Requests ended when the current idle period began.
    seen_ended: u64,
    /// Whether this idle period has read bytes (its deadline is then the
    /// header timeout's, if sooner).
    heard: bool,
}

impl axum::serve::Listener for LimitedListener {
    type Io = Limited;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let permit = match self.permits.clone().acquire_owned().await {
                Ok(p) => p,
                // The semaphore is never closed; wait rather than spin.
                Err(_) => std::future::pending().await,
            };
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let Some(slot) = self.slot(addr.ip()) else {
                        tracing::warn!(
                            "connection from {} refused: {} open from that address",
                            addr.ip(),
                            self.limits.per_address
                        );
                        drop(io);
                        continue;
                    };
                    let _ = io.set_nodelay(true);
                    let limits = self.limits;
                    return (
                        Limited {
                            io,
                            _permit: permit,
                            _slot: slot,
                            activity: Arc::default(),
                            limits,
                            deadline: Box::pin(tokio::time::sleep(limits.idle_timeout)),
                            seen_ended: 0,
                            heard: false,
                        },
                        addr,
                    );
                }
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl Limited {
    /// Whether a request is running; when none is, a new idle period
    /// starts if one ended since the last look.
    fn running(&mut self) -> bool {
        if self.activity.running.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let ended = self.activity.ended.load(Ordering::SeqCst);
        if ended != self.seen_ended {
            self.seen_ended = ended;
            self.heard = false;
            let at = Instant::now() + self.limits.idle_timeout;
            self.deadline.as_mut().reset(at);
        }
        false
    }
}

impl AsyncRead for Limited {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let running = this.running();
        if !running && this.deadline.as_mut().poll(cx).is_ready() {
            // Idle, or a request head too slow: end of file, and the HTTP
            // server closes the connection.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        let got = matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if got && !running && !this.heard {
            this.heard = true;
            let at = Instant::now() + this.limits.header_timeout;
            if at < this.deadline.deadline() {
                this.deadline.as_mut().reset(at);
            }
        }
        r
    }
}

impl Limited {
    /// A write (a response still going out) pushes the idle deadline back.
    fn wrote(&mut self) {
        if !self.heard {
            let at = Instant::now() + self.limits.idle_timeout;
            if at > self.deadline.deadline() {
                self.deadline.as_mut().reset(at);
            }
        }
    }
}

impl AsyncWrite for Limited {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.wrote();
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.wrote();
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
