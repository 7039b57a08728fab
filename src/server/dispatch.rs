//! Which code answers a request on the hook port.
//!
//! A `POST` to a registered hook's own path — what Metacontroller sends, every call — goes
//! straight to [`hooks::handle`]; everything else (another method, a percent-escaped or
//! unknown path) goes through [`super::hook_router`], which answers it exactly as before.
//! Going round the router saved a 12 KiB memo hit 3,800 of its 67,300 instructions
//! (`scripts/instructions.sh`: path matching, a `tower::Oneshot` per layer, the panic
//! layer, the method router, each future moved into the next), and a hook's path is one
//! of a handful of fixed strings.

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Method, Request};
use axum::response::Response;
use futures_util::FutureExt;
use tower_service::Service;

use super::HookState;
use super::hooks::{self, HookRoute};

/// The hook port's service.
#[derive(Clone)]
pub struct HookService {
    state: Arc<HookState>,
    /// Each registered hook under the path it is served on.
    paths: Arc<[(Box<str>, HookRoute)]>,
    /// Everything that is not a `POST` to one of `paths`.
    router: Router,
}

impl HookService {
    /// The service answering hook calls over `state`.
    pub fn new(state: Arc<HookState>) -> HookService {
        let paths = state
            .routes
            .iter()
            .map(|route| (route.path().into_boxed_str(), *route))
            .collect();
        HookService {
            router: super::hook_router(state.clone()),
            state,
            paths,
        }
    }

    /// The hook served on exactly `path`.
    fn hook_at(&self, path: &str) -> Option<HookRoute> {
        self.paths
            .iter()
            .find(|(served_on, _)| **served_on == *path)
            .map(|(_, route)| *route)
    }
}

/// The future of one call.
pub type Call = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> Service<Request<B>> for HookService
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Call;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Neither the handler nor the router ever waits to take a call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Call {
        let hook = if request.method() == Method::POST {
            self.hook_at(request.uri().path())
        } else {
            None
        };
        let Some(route) = hook else {
            return Box::pin(self.router.call(request));
        };
        let state = self.state.clone();
        let answering = AssertUnwindSafe(hooks::handle(state, route, request.map(Body::new)));
        // As the router's panic layer does for the other paths: a panic is a 500 with a
        // JSON body, never a dropped connection.
        Box::pin(
            answering
                .catch_unwind()
                .map(|answered| Ok(answered.unwrap_or_else(super::panic_response))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::{ControllerSettings, Registry};
    use crate::server::{Clock, Limits, compute};
    use axum::http::{HeaderName, StatusCode, header};
    use http_body_util::BodyExt;

    /// A sync request as Metacontroller sends it, from the golden fixtures (read when the
    /// test runs: the image's build stage compiles the sources without them).
    fn fixture() -> Bytes {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/hooks-tests/apimock/definition-edited/request.json"
        );
        std::fs::read(path)
            .map(Bytes::from)
            .unwrap_or_else(|error| panic!("{path}: {error}"))
    }

    fn state() -> Arc<HookState> {
        let compute = compute::ComputePool::start(1, tokio::runtime::Handle::current())
            .unwrap_or_else(|error| panic!("compute thread: {error}"));
        Arc::new(HookState::new(
            Registry::standard(ControllerSettings::default()),
            Limits::default(),
            None,
            // Both answers are stamped with the same time, whenever each is computed.
            Clock::Fixed(jiff::Timestamp::UNIX_EPOCH),
            compute,
        ))
    }

    /// What a client sees of an answer.
    #[derive(Debug, PartialEq)]
    struct Seen {
        status: StatusCode,
        headers: Vec<(HeaderName, Option<String>)>,
        body: Bytes,
    }

    async fn seen<S>(mut service: S, request: Request<Body>) -> Seen
    where
        S: Service<Request<Body>, Response = Response, Error = Infallible>,
    {
        let Ok(()) = std::future::poll_fn(|cx| service.poll_ready(cx)).await;
        let Ok(response) = service.call(request).await;
        let headers = [header::CONTENT_TYPE, header::ETAG, header::ALLOW]
            .into_iter()
            .map(|name| {
                let value = response
                    .headers()
                    .get(&name)
                    .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
                (name, value)
            })
            .collect();
        let status = response.status();
        let body = match response.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => panic!("the body cannot be read: {error}"),
        };
        Seen {
            status,
            headers,
            body,
        }
    }

    fn request(method: Method, path: &str, body: Bytes) -> Request<Body> {
        let mut request = Request::new(Body::from(body));
        *request.method_mut() = method;
        *request.uri_mut() = path
            .parse()
            .unwrap_or_else(|error| panic!("{path}: {error}"));
        request
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_call_is_answered_as_the_router_answers_it() {
        // Two servers' worth of state, so neither answer is the other's memo hit.
        let (direct, routed) = (state(), state());
        let fixture = fixture();
        let cases = [
            (Method::POST, "/apimock/sync", fixture.clone()),
            (Method::POST, "/apimock/finalize", fixture.clone()),
            (Method::POST, "/configsync/sync", fixture.clone()),
            (
                Method::POST,
                "/apimock/sync",
                Bytes::from_static(b"{not json"),
            ),
            (Method::POST, "/ap%69mock/sync", fixture.clone()),
            (Method::POST, "/apimock/sync/", fixture.clone()),
            (Method::POST, "/nosuch/sync", fixture.clone()),
            (Method::GET, "/apimock/sync", Bytes::new()),
            (Method::PUT, "/apimock/sync", fixture),
        ];
        let mut statuses = Vec::new();
        for (method, path, body) in cases {
            let through_service = seen(
                HookService::new(direct.clone()),
                request(method.clone(), path, body.clone()),
            )
            .await;
            let through_router = seen(
                crate::server::hook_router(routed.clone()),
                request(method.clone(), path, body),
            )
            .await;
            assert_eq!(through_service, through_router, "{method} {path}");
            statuses.push(through_service.status.as_u16());
        }
        // The cases reach every kind of answer, so the comparison covers each.
        for status in [200, 400, 404, 405] {
            assert!(
                statuses.contains(&status),
                "no case answered {status}: {statuses:?}"
            );
        }
    }

    /// Panics while trying to answer from what it remembers, which the server does on
    /// the async worker, inside the call's own task: only the service's panic guard (or
    /// the router's panic layer) stands between that panic and a dropped connection.
    struct PanicsOnTheWorker;

    impl crate::controllers::CompositeHooks for PanicsOnTheWorker {
        fn sync(
            &self,
            _: &crate::protocol::CompositeRequest,
            _: &crate::controllers::Context,
        ) -> Result<crate::protocol::CompositeResponse, crate::error::HookError> {
            Err(crate::error::HookError::Internal("not reached".to_owned()))
        }

        fn finalize(
            &self,
            request: &crate::protocol::CompositeRequest,
            ctx: &crate::controllers::Context,
        ) -> Result<crate::protocol::CompositeResponse, crate::error::HookError> {
            self.sync(request, ctx)
        }

        fn try_cached(
            &self,
            _: &crate::protocol::CompositeRequest,
            _: &crate::controllers::Context,
        ) -> Option<Result<crate::protocol::CompositeResponse, crate::error::HookError>> {
            panic!("a controller bug on the async worker")
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_the_call_is_a_500_with_a_json_body_either_way() {
        let state = |registry| {
            let compute = compute::ComputePool::start(1, tokio::runtime::Handle::current())
                .unwrap_or_else(|error| panic!("compute thread: {error}"));
            Arc::new(HookState::new(
                registry,
                Limits::default(),
                None,
                Clock::Fixed(jiff::Timestamp::UNIX_EPOCH),
                compute,
            ))
        };
        let registry = || Registry::new().composite("panics", PanicsOnTheWorker);
        let body = Bytes::from_static(
            br#"{"controller": {}, "parent": {"metadata": {"name": "p", "namespace": "n"}}, "children": {}}"#,
        );
        let direct = seen(
            HookService::new(state(registry())),
            request(Method::POST, "/panics/sync", body.clone()),
        )
        .await;
        let routed = seen(
            crate::server::hook_router(state(registry())),
            request(Method::POST, "/panics/sync", body),
        )
        .await;
        assert_eq!(direct, routed);
        assert_eq!(direct.status, StatusCode::INTERNAL_SERVER_ERROR);
        let answer: serde_json::Value = serde_json::from_slice(&direct.body)
            .unwrap_or_else(|error| panic!("the 500 has a JSON body: {error}"));
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|error| error.contains("internal fault")),
            "{answer}"
        );
    }
}
