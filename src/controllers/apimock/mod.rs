//! APIMock: an OpenAPI document in a CR becomes a running mock server.
//!
//! `sync` validates the definition (memoised by hash), builds the children from the
//! definition it can serve — the spec's if valid, else the last good one still held in
//! the observed ConfigMap — and reports status from the observed Deployment. `finalize`
//! asks for no children and completes once they are gone, whatever the spec holds.

pub mod children;
pub mod definition;
pub mod spec;
mod status;
mod validate;

use std::sync::Arc;

use serde_json::{Value, json};

use self::children::Plan;
use self::definition::{Analysis, Memo};
use self::spec::DefinitionStatus;
use self::status::{Facts, Rollout};
use crate::controllers::common::conditions::{Decided, format_time};
use crate::controllers::common::keep::{observed_children, observed_status};
use crate::controllers::common::memo::Memo as BoundedMemo;
use crate::controllers::common::names::check_dns1035_label;
use crate::controllers::{CompositeHooks, Context, ControllerSettings};
use crate::error::HookError;
use crate::protocol::{CompositeRequest, CompositeResponse, object_name};

/// Stoplight Prism 5, pinned to the version the end-to-end test runs.
pub const DEFAULT_MOCK_IMAGE: &str = "stoplight/prism:5.14.2";
pub const DEFAULT_DOCS_IMAGE: &str = "swaggerapi/swagger-ui:v5.17.14";

pub struct ApiMock {
    mock_image: String,
    docs_image: String,
    memo: Memo,
    /// Built children by the hash of everything they depend on: most syncs repeat the
    /// last answer, and building four objects through typed structs costs more than
    /// parsing them.
    built: BoundedMemo<[u8; 32], Arc<Vec<Value>>>,
}

/// Children sets the memo is sized for.
const BUILT_ENTRIES: u64 = 1024;
/// Bytes of definitions held in the children memo at most (each entry carries its
/// definition in the ConfigMap): a count alone would let 1024 near-1-MiB definitions
/// pin a gigabyte.
const BUILT_BYTES: u64 = 64 * 1024 * 1024;

/// An entry's weight: the definition its ConfigMap holds plus the other objects.
fn built_weight(_key: &[u8; 32], children: &Arc<Vec<Value>>) -> u64 {
    let definition: usize = children
        .iter()
        .filter_map(|child| child.get("data").and_then(Value::as_object))
        .flat_map(|data| data.values())
        .filter_map(Value::as_str)
        .map(str::len)
        .sum();
    (definition + 4096) as u64
}

impl ApiMock {
    pub fn new(settings: &ControllerSettings) -> ApiMock {
        ApiMock {
            mock_image: settings.mock_image.clone(),
            docs_image: settings.docs_image.clone(),
            memo: Memo::default(),
            built: BoundedMemo::weighted(BUILT_ENTRIES, BUILT_BYTES, built_weight),
        }
    }
}

impl CompositeHooks for ApiMock {
    fn sync(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        let parent = &request.parent;
        let now = format_time(ctx.now);
        let name = object_name(parent).unwrap_or_default();
        let namespace = parent
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let observed_deployment = request.children.find("Deployment", "apps/v1", None, name);
        let rollout = Rollout::observe(observed_deployment);

        if let Err(invalid) = check_dns1035_label(name) {
            let validated = Decided::new(
                "Validated",
                false,
                "InvalidName",
                format!("metadata.name cannot name the mock's Service: {invalid}"),
            );
            let mut response = answer(validated, None, None, rollout, None, parent, &now);
            response.children = Some(observed_children(&request.children));
            return Ok(response);
        }
        let spec = match spec::parse_spec(parent) {
            Ok(spec) => spec,
            Err(problem) => {
                let validated = Decided::new("Validated", false, "InvalidSpec", problem);
                let kept = observed_children(&request.children);
                let serving = rollout.served_sha256.clone();
                let mut response = answer(
                    validated,
                    None,
                    serving.as_deref(),
                    rollout,
                    None,
                    parent,
                    &now,
                );
                response.children = Some(kept);
                return Ok(response);
            }
        };

        let wanted = self.analysis(&spec.definition, ctx)?;
        let (served, served_text, validated) = match &wanted.outcome {
            Ok(summary) => {
                let plural = if summary.operations == 1 { "" } else { "s" };
                let message = format!(
                    "{} {} with {} operation{plural} is a valid definition",
                    summary.title, summary.version, summary.operations
                );
                (
                    Some(wanted.clone()),
                    Some(spec.definition.as_str()),
                    Decided::new("Validated", true, "ValidDefinition", message),
                )
            }
            Err(invalid) => {
                let last_good = self.last_good_definition(request, name, ctx)?;
                let validated =
                    Decided::new("Validated", false, invalid.reason, invalid.message.clone());
                match last_good {
                    Some((analysis, text)) => (Some(analysis), Some(text), validated),
                    None => (None, None, validated),
                }
            }
        };
        let (Some(served), Some(served_text)) = (served, served_text) else {
            // Nothing valid to build from: whatever exists stays as it is.
            let mut response = answer(validated, None, None, rollout, None, parent, &now);
            response.children = Some(observed_children(&request.children));
            return Ok(response);
        };
        let plan = Plan {
            name,
            spec: &spec,
            definition: served_text,
            format: served.format,
            sha256: &served.sha256,
            image: spec
                .image
                .as_deref()
                .filter(|i| !i.is_empty())
                .unwrap_or(&self.mock_image),
            docs_image: &self.docs_image,
        };
        let children = self.children(&plan)?;
        let urls = Urls::of(name, namespace, &spec);
        let mut response = answer(
            validated,
            Some(&served),
            Some(&served.sha256),
            rollout,
            Some(urls),
            parent,
            &now,
        );
        response.children = Some(children);
        Ok(response)
    }

    fn finalize(
        &self,
        request: &CompositeRequest,
        _ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        // Deliberately independent of the spec: a broken definition must never keep the
        // parent stuck in Terminating (APIrator weakness W10).
        let mut status = observed_status(&request.parent);
        status.insert("phase".to_owned(), json!("Terminating"));
        Ok(CompositeResponse::new(Value::Object(status), Vec::new())
            .with_finalized(request.children.is_empty()))
    }

    fn honours_cheap_only(&self) -> bool {
        true
    }

    fn answers_only_from_request(&self) -> bool {
        true
    }
}

impl ApiMock {
    /// `children::build`, memoised on the inputs it reads: the name, the served
    /// definition's hash and format, the images, and every spec field but the definition.
    fn children(&self, plan: &Plan<'_>) -> Result<Vec<Value>, HookError> {
        let spec = plan.spec;
        let inputs = (
            plan.name,
            plan.sha256,
            plan.format.file_name(),
            plan.image,
            plan.docs_image,
            (
                &spec.service,
                &spec.ingress,
                &spec.replicas,
                &spec.docs,
                &spec.resources,
                &spec.mock,
            ),
        );
        let encoded = serde_json::to_vec(&inputs)
            .map_err(|e| HookError::Internal(format!("cannot key the children cache: {e}")))?;
        let key = *blake3::hash(&encoded).as_bytes();
        if let Some(hit) = self.built.get(&key) {
            return Ok(hit.as_ref().clone());
        }
        let built = children::build(plan)?;
        self.built.insert(key, Arc::new(built.clone()));
        Ok(built)
    }

    /// The definition held in the observed ConfigMap, if it is one we can serve.
    fn last_good_definition<'r>(
        &self,
        request: &'r CompositeRequest,
        name: &str,
        ctx: &Context,
    ) -> Result<Option<(Arc<Analysis>, &'r str)>, HookError> {
        let Some(data) = request
            .children
            .find("ConfigMap", "v1", None, name)
            .and_then(|config_map| config_map.get("data"))
        else {
            return Ok(None);
        };
        let Some(text) = [definition::Format::Yaml, definition::Format::Json]
            .iter()
            .find_map(|format| data.get(format.file_name()).and_then(Value::as_str))
        else {
            return Ok(None);
        };
        let analysis = self.analysis(text, ctx)?;
        Ok(analysis.outcome.is_ok().then_some((analysis, text)))
    }

    /// The memoised analysis of a definition. Validating one not seen before is the only
    /// slow step of an APIMock hook, so that is where a cheap-only call stops.
    fn analysis(&self, text: &str, ctx: &Context) -> Result<Arc<Analysis>, HookError> {
        if ctx.cheap_only {
            return self.memo.lookup(text).ok_or(HookError::NeedsBlockingPool);
        }
        self.memo
            .analyze_by(text, ctx.deadline)
            .ok_or_else(saturated)
    }
}

/// No heavy-validation slot came free before the call's deadline (the server has answered
/// 503 by then; this only stops work nobody waits for).
fn saturated() -> HookError {
    HookError::Saturated(
        "every slot for validating large definitions stayed busy until the deadline; retry later"
            .to_owned(),
    )
}

/// Where the mock answers: in the cluster, and through the Ingress when there is one.
struct Urls {
    cluster: String,
    external: Option<String>,
}

impl Urls {
    fn of(name: &str, namespace: &str, spec: &spec::ApiMockSpec) -> Urls {
        let external = spec.ingress.as_ref().map(|ingress| {
            let scheme = if ingress.tls.is_some() {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{}{}", ingress.hostname, ingress.path)
        });
        Urls {
            cluster: format!(
                "http://{name}.{namespace}.svc:{}",
                children::service_port(spec)
            ),
            external,
        }
    }
}

fn answer(
    validated: Decided,
    served: Option<&Analysis>,
    serving: Option<&str>,
    rollout: Rollout,
    urls: Option<Urls>,
    parent: &Value,
    now: &str,
) -> CompositeResponse {
    let definition = served.and_then(|analysis| {
        analysis
            .outcome
            .as_ref()
            .ok()
            .map(|summary| DefinitionStatus {
                version: summary.version.clone(),
                title: summary.title.clone(),
                operations: summary.operations,
                sha256: analysis.sha256.clone(),
            })
    });
    let status = status::compute(
        Facts {
            validated,
            serving,
            definition,
            rollout,
            external_url: urls.as_ref().and_then(|u| u.external.clone()),
            url: urls.map(|u| u.cluster),
        },
        parent,
        now,
    );
    CompositeResponse::new(status, Vec::new())
}

#[cfg(test)]
mod tests {
    use crate::controllers::{Context, ControllerSettings, Registry};
    use crate::protocol::Hook;

    fn request(definition: &str) -> Vec<u8> {
        serde_json::json!({
            "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
            "parent": {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
                       "metadata": {"name": "pets", "namespace": "team", "generation": 1, "uid": "u"},
                       "spec": {"definition": definition}},
            "children": {}, "related": {}
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_cheap_call_defers_an_unseen_definition_and_answers_a_seen_one_identically() {
        let registry = Registry::standard(ControllerSettings::default());
        let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
        let body = request("openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths: {}\n");
        assert!(
            registry
                .call_cheap("apimock", Hook::Sync, &body, &ctx)
                .is_none(),
            "validating a new definition is slow work and must be deferred"
        );
        let full = registry.call("apimock", Hook::Sync, &body, &ctx);
        let cheap = registry
            .call_cheap("apimock", Hook::Sync, &body, &ctx)
            .map(|outcome| outcome.result);
        let (Ok(full), Some(Ok(cheap))) = (full.result, cheap) else {
            panic!("both calls should answer once the definition is memoised");
        };
        assert_eq!(full, cheap);
    }

    #[test]
    fn only_controllers_that_honour_cheap_only_are_tried_cheaply() {
        let registry = Registry::standard(ControllerSettings::default());
        let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
        for controller in ["monitoredservice", "configsync", "nonexistent"] {
            assert!(
                registry
                    .call_cheap(controller, Hook::Customize, b"{}", &ctx)
                    .is_none(),
                "{controller}"
            );
        }
        assert!(
            registry
                .call_cheap("apimock", Hook::Customize, b"{\"parent\": {}}", &ctx)
                .is_some()
        );
    }
}
