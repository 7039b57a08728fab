//! How a source's HTTP client connects: every name through the address policy, every
//! connection through the engine's egress proxy when one applies (CONNECT for https,
//! absolute-form for http, both from hyper-util), and every byte the remote sends
//! counted by the fetch's [`Meter`] before anything reads it.
//!
//! TLS is hyper-rustls' on top of this, so what is counted is what arrives on the
//! socket: TLS records, heads, `1xx` answers and bodies before any decoding.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::Meter;
use crate::FetchError;
use crate::policy::Policy;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a TCP connection (to the origin or the proxy) may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Name resolution that drops (and so refuses) disallowed destination addresses.
#[derive(Clone)]
pub(super) struct PolicyResolver {
    policy: Arc<Policy>,
}

impl tower_service::Service<Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut allowed = Vec::new();
            let mut last_refusal = None;
            for address in found {
                match policy.check_address(&host, address.ip()) {
                    Ok(()) => allowed.push(address),
                    Err(refusal) => last_refusal = Some(refusal),
                }
            }
            if allowed.is_empty() {
                return Err(match last_refusal {
                    Some(refusal) => Box::new(refusal) as BoxError,
                    None => format!("{host} has no addresses").into(),
                });
            }
            Ok(allowed.into_iter())
        })
    }
}

/// TCP connections whose every received byte the meter counts.
#[derive(Clone)]
struct MeteredTcp {
    tcp: HttpConnector<PolicyResolver>,
    meter: Arc<Meter>,
    /// Whether the connection carries absolute-form requests to a proxy.
    proxied: bool,
}

impl tower_service::Service<Uri> for MeteredTcp {
    type Response = MeteredConn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<MeteredConn, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let connecting = self.tcp.call(destination);
        let (meter, proxied) = (self.meter.clone(), self.proxied);
        Box::pin(async move {
            let stream = connecting.await?.into_inner();
            Ok(MeteredConn {
                io: TokioIo::new(Metered { stream, meter }),
                proxied,
            })
        })
    }
}

/// The connector of one fetch's client: direct, or through the egress proxy the policy
/// names for the destination.
#[derive(Clone)]
pub(super) struct Route {
    policy: Arc<Policy>,
    direct: MeteredTcp,
}

impl Route {
    pub(super) fn new(policy: Arc<Policy>, meter: Arc<Meter>) -> Route {
        let mut tcp = HttpConnector::new_with_resolver(PolicyResolver {
            policy: policy.clone(),
        });
        // https is hyper-rustls' to speak on top of these connections.
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        Route {
            policy,
            direct: MeteredTcp {
                tcp,
                meter,
                proxied: false,
            },
        }
    }
}

impl tower_service::Service<Uri> for Route {
    type Response = MeteredConn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<MeteredConn, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.direct.poll_ready(cx)
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let scheme = destination.scheme_str().unwrap_or_default().to_owned();
        let host = destination.host().unwrap_or_default().to_owned();
        let Some(proxy) = self.policy.proxies.for_destination(&scheme, &host).cloned() else {
            return self.direct.call(destination);
        };
        // A proxy given by address is never resolved, so it is checked here, as a name's
        // addresses are checked by the resolver.
        if let Ok(address) = proxy.host.parse::<std::net::IpAddr>()
            && let Err(refusal) = self.policy.check_address(&proxy.host, address)
        {
            return Box::pin(async move { Err(Box::new(refusal) as BoxError) });
        }
        let proxy_uri = match proxy.shown().parse::<Uri>() {
            Ok(uri) => uri,
            Err(error) => return Box::pin(async move { Err(Box::new(error) as BoxError) }),
        };
        let authorization = proxy.credentials.as_deref().and_then(basic);
        if scheme == "https" {
            let mut tunnel = Tunnel::new(proxy_uri, self.direct.clone());
            if let Some(authorization) = authorization {
                tunnel = tunnel.with_auth(authorization);
            }
            let connecting = tunnel.call(destination);
            return Box::pin(async move { connecting.await.map_err(|e| Box::new(e) as BoxError) });
        }
        // Plain http goes to the proxy as absolute-form requests; the client adds the
        // proxy's credentials to each (see `MeteredClient::send`).
        let mut proxied = self.direct.clone();
        proxied.proxied = true;
        proxied.call(proxy_uri)
    }
}

/// `Proxy-Authorization: Basic` for `user:password`.
pub(super) fn basic(credentials: &str) -> Option<http::HeaderValue> {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    let mut value = http::HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// A TCP stream whose received bytes are counted; a read past the meter's cap fails with
/// the meter's refusal, so the fetch ends there whatever the remote still sends.
struct Metered {
    stream: TcpStream,
    meter: Arc<Meter>,
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let received = buf.filled().len().saturating_sub(before);
            if let Err(refusal) = self.meter.count(received) {
                return Poll::Ready(Err(io::Error::other(refusal)));
            }
        }
        polled
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A metered connection as hyper speaks on it.
pub(super) struct MeteredConn {
    io: TokioIo<Metered>,
    proxied: bool,
}

impl Connection for MeteredConn {
    fn connected(&self) -> Connected {
        Connected::new().proxy(self.proxied)
    }
}

impl Read for MeteredConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for MeteredConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Why a refusal from the connector is a [`FetchError`] of its own.
pub(super) fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<FetchError> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(refusal) = error.downcast_ref::<FetchError>() {
            return Some(refusal.clone());
        }
        // An io::Error's `source()` skips the error it wraps; `get_ref` is that error.
        current = match error.downcast_ref::<io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    None
}
