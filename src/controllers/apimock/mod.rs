//! APIMock: an OpenAPI document in a CR becomes a running mock server.
//!
//! `sync` validates the definition (memoised by hash), builds the children from the
//! definition it can serve — the spec's if valid, else the last good one still held in
//! the observed ConfigMap — and reports status from the observed Deployment. `finalize`
//! asks for no children and completes once they are gone, whatever the spec holds.

pub mod bundle;
pub mod children;
mod decide;
pub mod definition;
mod exposure;
mod held;
mod origin;
pub mod spec;
mod status;
mod validate;
pub mod verdict;

use std::time::Duration;

use serde_json::{Value, json};

use self::children::{DEFINITION_HASH_ANNOTATION, Plan};
use self::decide::{Decision, definition_status};
use self::origin::Origin;
use self::status::{Facts, SourceFacts};
use crate::controllers::common::bounds;
use crate::controllers::common::conditions::{ConditionType, Decided, format_time};
use crate::controllers::common::keep::{observed_children, observed_status};
use crate::controllers::common::names::check_dns1035_label;
use crate::controllers::common::policy::ExposurePolicy;
use crate::controllers::common::polling;
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reading::Reads;
use crate::controllers::common::reason::Reason;
use crate::controllers::common::refresh;
use crate::controllers::common::rollout::Rollout;
use crate::controllers::common::source_sync::SourceCall;
use crate::controllers::common::taken::{self, ChildName};
use crate::controllers::{Answer, CompositeHooks, Context, ControllerSettings, Reply};
use crate::error::HookError;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, CustomizeResponse, RelatedResourceRule,
    object_name, object_namespace,
};

/// Stoplight Prism 5, pinned to the version the end-to-end test runs.
pub const DEFAULT_MOCK_IMAGE: &str = "stoplight/prism:5.14.2";
/// Swagger UI, served next to the mock with `spec.docs.enabled`.
pub const DEFAULT_DOCS_IMAGE: &str = "swaggerapi/swagger-ui:v5.17.14";

/// The APIMock controller.
pub struct ApiMockHooks {
    mock_image: String,
    docs_image: String,
    /// What the operator lets a CR expose.
    policy: ExposurePolicy,
}

impl ApiMockHooks {
    /// An APIMock controller using the images of `settings`.
    pub fn new(settings: &ControllerSettings) -> ApiMockHooks {
        ApiMockHooks {
            mock_image: settings.mock_image.clone(),
            docs_image: settings.docs_image.clone(),
            policy: settings.policy.clone(),
        }
    }
}

impl ApiMockHooks {
    fn answer(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
        reads: &mut Reads<'_>,
        asked: &mut refresh::Outcome,
    ) -> Result<Reply<CompositeResponse>, HookError> {
        let parent = &request.parent;
        let name = object_name(parent).unwrap_or_default();
        let namespace = object_namespace(parent).unwrap_or("default");
        let call = Call {
            request,
            name,
            now: format_time(ctx.now),
            rollout: Rollout::observe(
                request.children.find("Deployment", "apps/v1", None, name),
                DEFINITION_HASH_ANNOTATION,
            ),
        };

        let (spec, exposed) = match self.checked_spec(parent, name, namespace) {
            Ok(checked) => checked,
            Err((validated, serving_observed)) => {
                return call
                    .keep_running(validated, None, serving_observed)
                    .map(Reply::await_change);
            }
        };
        let origin = match origin::origin(&spec, &request.related, namespace, name) {
            Ok(origin) => origin,
            Err(Problem { reason, message }) => {
                let validated = Decided::new(ConditionType::Validated, false, reason, message);
                return call
                    .keep_running(validated, None, true)
                    .map(Reply::await_change);
            }
        };
        if let Some(outcome) = ask_for_refresh(&origin, reads, parent) {
            *asked = outcome;
        }
        let running = held::running(&request.children, name);
        let reading = origin::read(
            &origin,
            &request.related,
            namespace,
            running.as_ref(),
            reads,
        );
        let decision = self.decide(&call, &reading, ctx)?;
        let poll_seconds = reading.poll_seconds;
        let verified = reading.verified.clone();
        let fetched = refresh_if_behind(&origin, &decision, reading, reads);
        let source = source_facts(&origin, fetched, verified, decision.served.as_ref());
        let Some(served) = decision.served else {
            // Nothing valid to build from: whatever exists stays as it is.
            let response = call.keep_running(decision.validated, source, false)?;
            return Ok(Reply::after_seconds(response, poll_seconds));
        };
        let response = self.serve(
            &call,
            &spec,
            &served,
            (decision.validated, exposed),
            source,
            namespace,
        )?;
        Ok(Reply::after_seconds(response, poll_seconds))
    }

    /// The answer that serves `served`: its children and the status that describes them.
    fn serve(
        &self,
        call: &Call<'_>,
        spec: &spec::ApiMockSpec,
        served: &decide::ServedDefinition<'_>,
        (validated, exposed): (Decided, Option<Decided>),
        source: Option<SourceFacts>,
        namespace: &str,
    ) -> Result<CompositeResponse, HookError> {
        let name = call.name;
        let children = children::build(&Plan {
            name,
            spec,
            served: served.files(),
            sha256: &served.analysis.sha256,
            revision: served.revision.as_ref(),
            made_at: served.made_at,
            image: spec
                .image
                .as_deref()
                .filter(|i| !i.is_empty())
                .unwrap_or(&self.mock_image),
            docs_image: &self.docs_image,
        })?;
        let urls = Urls::of(name, namespace, spec);
        let facts = Facts {
            validated,
            exposed,
            serving: Some(&served.analysis.sha256),
            definition: definition_status(&served.analysis),
            rollout: call.rollout.clone(),
            url: Some(urls.cluster),
            external_url: urls.external,
            source,
            apply_limit: status::apply_limit(&children),
            taken: taken::condition(
                &children,
                &call.request.children,
                &call.request.related,
                namespace,
                "APIMock",
            ),
        };
        let parent = &call.request.parent;
        let mut response = CompositeResponse::typed(&status::compute(facts, parent, &call.now))?;
        response.children = Some(children);
        Ok(response)
    }

    /// The spec, when the name can name the children, the spec parses and the policy
    /// allows its Service; otherwise the Validated condition that says why not, and
    /// whether the observed Deployment still serves what it served. An Ingress that
    /// cannot be made is left out of the spec, and the `Exposed` condition says why: the
    /// rest of the mock runs without it.
    fn checked_spec(
        &self,
        parent: &Value,
        name: &str,
        namespace: &str,
    ) -> Result<(spec::ApiMockSpec, Option<Decided>), (Decided, bool)> {
        let invalid =
            |reason, message| Decided::new(ConditionType::Validated, false, reason, message);
        if let Err(problem) = check_dns1035_label(name) {
            let message = format!("metadata.name cannot name the mock's Service: {problem}");
            return Err((invalid(Reason::InvalidName, message), false));
        }
        let mut spec = spec::parse_spec(parent)
            .map_err(|problem| (invalid(Reason::InvalidSpec, problem.to_string()), true))?;
        let checked =
            bounds::check_optional("spec.image", spec.image.as_deref(), bounds::IMAGE_BYTES)
                .and_then(|()| exposure::check(&spec, &self.policy));
        if let Err(Problem { reason, message }) = checked {
            return Err((invalid(reason, message), true));
        }
        let exposed = spec.ingress.as_ref().map(|ingress| {
            match exposure::check_ingress_exposure(&spec, &self.policy, namespace) {
                Ok(()) => Decided::new(
                    ConditionType::Exposed,
                    true,
                    Reason::IngressAdmitted,
                    format!("the Ingress routes {}{}", ingress.hostname, ingress.path),
                ),
                Err(Problem { reason, message }) => Decided::new(
                    ConditionType::Exposed,
                    false,
                    reason,
                    format!("{message}; the Ingress is left out, and the mock runs without it"),
                ),
            }
        });
        if exposed.as_ref().is_some_and(|e| !e.status) {
            spec.ingress = None;
        }
        Ok((spec, exposed))
    }
}

/// For a fetched origin: asks the source engine to fetch now when the parent asks for
/// it ([`refresh::ask`]).
fn ask_for_refresh(
    origin: &Origin<'_>,
    reads: &mut Reads<'_>,
    parent: &Value,
) -> Option<refresh::Outcome> {
    let Origin::Fetched {
        request, interval, ..
    } = origin
    else {
        return None;
    };
    Some(refresh::ask(
        reads,
        request,
        Duration::from_secs(*interval),
        parent,
        refresh::recorded(parent),
    ))
}

impl CompositeHooks for ApiMockHooks {
    fn parent_types(&self) -> &'static [crate::controllers::ParentType] {
        &[("apirator.io/v1alpha1", "APIMock")]
    }

    /// [`ApiMockHooks::answer`], with the handled "fetch now" value recorded.
    fn sync(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<Answer<CompositeResponse>, HookError> {
        let mut call = SourceCall::begin(ctx, &request.parent);
        let reply = self.answer(request, ctx, &mut call.reads, &mut call.asked)?;
        Ok(call.finish(reply))
    }

    fn finalize(
        &self,
        request: &CompositeRequest,
        _ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        // Deliberately independent of the spec: a broken definition must never keep the
        // parent stuck in Terminating, as APIrator's finalizer could.
        let mut status = observed_status(&request.parent);
        status.insert("phase".to_owned(), json!("Terminating"));
        Ok(CompositeResponse::new(Value::Object(status), Vec::new())
            .with_finalized(request.children.is_empty()))
    }

    /// The objects holding its children's names (to tell a name another parent took), the
    /// ConfigMap of `definitionFrom.configMapKeyRef` and the Secret of a source's
    /// `secretRef`, each by name in the APIMock's namespace only.
    fn customize(&self, request: &CustomizeRequest) -> Result<CustomizeResponse, HookError> {
        let name = object_name(&request.parent).unwrap_or_default();
        let namespace = object_namespace(&request.parent).unwrap_or("default");
        let Ok(spec) = spec::parse_spec(&request.parent) else {
            return Ok(CustomizeResponse::default());
        };
        let named = |resource: &str, name: &str| RelatedResourceRule {
            api_version: "v1".to_owned(),
            resource: resource.to_owned(),
            names: Some(vec![name.to_owned()]),
            namespace: Some(namespace.to_owned()),
            ..RelatedResourceRule::default()
        };
        let mut rules = taken::rules(namespace, &child_names(name, &spec));
        if let Some(key_ref) = spec
            .definition_from
            .as_ref()
            .and_then(|from| from.config_map_key_ref.as_ref())
        {
            rules.push(named("configmaps", &key_ref.name));
        }
        for secret in origin::secret_names(&spec) {
            rules.push(named("secrets", &secret));
        }
        Ok(CustomizeResponse {
            related_resources: rules,
        })
    }
}

/// What status says of the origin: how reading it went, and the revision served.
fn source_facts(
    origin: &origin::Origin<'_>,
    fetched: Option<Decided>,
    verified: Option<Decided>,
    served: Option<&decide::ServedDefinition<'_>>,
) -> Option<SourceFacts> {
    origin::describe(origin)
        .zip(fetched)
        .map(|(description, fetched)| SourceFacts {
            awaiting: fetched.reason == Reason::FetchPending && served.is_none(),
            fetched,
            verified,
            description,
            revision: served.and_then(|served| served.revision.clone()),
        })
}

/// The children an APIMock called `name` answers with: all take its name.
fn child_names(name: &str, spec: &spec::ApiMockSpec) -> Vec<ChildName> {
    let mut names = vec![
        ChildName::new("ConfigMap", "v1", "configmaps", name),
        ChildName::new("Deployment", "apps/v1", "deployments", name),
        ChildName::new("Service", "v1", "services", name),
    ];
    if spec.ingress.is_some() {
        names.push(ChildName::new(
            "Ingress",
            "networking.k8s.io/v1",
            "ingresses",
            name,
        ));
    }
    names
}

/// What one sync call knows before it decides anything.
struct Call<'r> {
    request: &'r CompositeRequest,
    name: &'r str,
    now: String,
    rollout: Rollout,
}

impl Call<'_> {
    /// An answer that leaves every observed child as it is, reporting `validated`.
    /// `serving_observed`: the observed Deployment still serves what it served.
    fn keep_running(
        &self,
        validated: Decided,
        source: Option<SourceFacts>,
        serving_observed: bool,
    ) -> Result<CompositeResponse, HookError> {
        let serving = self
            .rollout
            .served_hash
            .clone()
            .filter(|_| serving_observed);
        let facts = Facts {
            validated,
            exposed: None,
            serving: serving.as_deref(),
            definition: None,
            rollout: self.rollout.clone(),
            url: None,
            external_url: None,
            source,
            apply_limit: None,
            taken: None,
        };
        let mut response =
            CompositeResponse::typed(&status::compute(facts, &self.request.parent, &self.now))?;
        response.children = Some(observed_children(&self.request.children));
        Ok(response)
    }
}

/// The `Fetched` condition. When another replica has already read a newer copy of the
/// same ref, what runs is kept and this server's copy is refreshed now rather than at
/// the next interval (and, the reads saying so, the next sync comes soon).
fn refresh_if_behind(
    origin: &Origin<'_>,
    decision: &Decision<'_>,
    reading: origin::Reading<'_>,
    reads: &mut Reads<'_>,
) -> Option<Decided> {
    let (Origin::Fetched { request, .. }, Some(running)) = (origin, &decision.behind) else {
        return reading.fetched;
    };
    let engine_says = reading.fetched?;
    Some(polling::refreshing(reads, request, running, engine_says))
}

/// Where the mock answers: in the cluster, and through the Ingress when there is one.
struct Urls {
    cluster: String,
    external: Option<String>,
}

impl Urls {
    fn of(name: &str, namespace: &str, spec: &spec::ApiMockSpec) -> Urls {
        let external = spec.ingress.as_ref().map(|ingress| {
            let scheme = if ingress.tls.is_some() || ingress.cert_manager == Some(true) {
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

#[cfg(test)]
mod sync_tests;
