//! Which definition to serve: the wanted one when it is valid (and not older than what
//! runs), else the last good one held in the observed ConfigMap; analyses memoised.

use std::sync::Arc;

use super::children;
use super::definition::{self, Analysis};
use super::origin::{self, Candidate};
use super::spec::DefinitionStatus;
use super::{ApiMockHooks, Call, bundle, held};
use crate::controllers::Context;
use crate::controllers::common::conditions::{ConditionType, Decided};
use crate::controllers::common::reason::Reason;
use crate::controllers::common::revisions::running_is_newer;
use crate::error::HookError;
use crate::memo::steps::{Step, StepKey};

/// The definition the children are built from, and the verdict on the wanted one.
pub(super) struct Decision<'r> {
    pub(super) validated: Decided,
    pub(super) served: Option<ServedDefinition<'r>>,
    /// The revision that runs, when it is newer than this server's copy of the source.
    pub(super) behind: Option<crate::source::Revision>,
}

/// A valid definition and where it came from.
pub(super) struct ServedDefinition<'r> {
    pub(super) analysis: Arc<Analysis>,
    pub(super) candidate: Candidate<'r>,
    pub(super) revision: Option<crate::source::Revision>,
    pub(super) made_at: Option<i64>,
}

impl ServedDefinition<'_> {
    pub(super) fn files(&self) -> children::ServedFiles<'_> {
        match &self.candidate {
            Candidate::Text(text) => children::ServedFiles::Text {
                text,
                format: self.analysis.format,
            },
            Candidate::Bundle(bundle) if bundle.is_single() => children::ServedFiles::Text {
                text: bundle.root_text(),
                format: self.analysis.format,
            },
            Candidate::Bundle(bundle) => children::ServedFiles::Bundle(bundle),
        }
    }
}

/// `Validated` when the wanted definition cannot be served: why it cannot, or (nothing
/// wanted) whether the last good one that keeps running is valid.
fn validated_keeping(
    invalid: Option<super::verdict::Invalid>,
    last_good: Option<&ServedDefinition<'_>>,
) -> Decided {
    let validated = |status, reason, message: String| {
        Decided::new(ConditionType::Validated, status, reason, message)
    };
    let nothing = || {
        validated(
            false,
            Reason::NoDefinition,
            "no definition has been read yet".to_owned(),
        )
    };
    match (invalid, last_good) {
        (Some(invalid), _) => validated(false, invalid.reason, invalid.message),
        (None, Some(running)) => match &running.analysis.outcome {
            Ok(summary) => validated(
                true,
                Reason::ValidDefinition,
                format!("{} (kept from the last good read)", valid_message(summary)),
            ),
            Err(_) => nothing(),
        },
        (None, None) => nothing(),
    }
}

impl ApiMockHooks {
    /// Serve the wanted definition when it is valid and not older than what runs; else
    /// the last good one still held in the observed ConfigMap.
    pub(super) fn decide<'r>(
        &self,
        call: &Call<'r>,
        reading: &origin::Reading<'r>,
        ctx: &Context,
    ) -> Result<Decision<'r>, HookError> {
        let wanted = match &reading.candidate {
            Some(Ok(candidate)) => Ok((candidate, analysis_of(candidate, ctx)?)),
            Some(Err(invalid)) => Err(Some(invalid.clone())),
            None => Err(None),
        };
        let invalid = match wanted {
            Ok((candidate, analysis)) => match &analysis.outcome {
                Ok(summary) => {
                    let validated = Decided::new(
                        ConditionType::Validated,
                        true,
                        Reason::ValidDefinition,
                        valid_message(summary),
                    );
                    let fresh = ServedDefinition {
                        analysis: analysis.clone(),
                        candidate: candidate.clone(),
                        revision: reading.revision.clone(),
                        made_at: reading.made_at,
                    };
                    return self.fresh_or_newer_held(
                        call,
                        fresh,
                        validated,
                        reading.after_running,
                        ctx,
                    );
                }
                Err(invalid) => Some(invalid.clone()),
            },
            Err(invalid) => invalid,
        };
        let last_good = self.last_good(call, ctx)?;
        Ok(Decision {
            validated: validated_keeping(invalid, last_good.as_ref()),
            served: last_good,
            behind: None,
        })
    }

    /// Serves the valid `fresh` definition unless the held one may be a newer copy of
    /// the same ref (the engine fetched `fresh` before it heard of it). The held definition
    /// is read (and analysed) only when its annotations say so: a warm sync of a definition
    /// from a source does not read it back at all.
    fn fresh_or_newer_held<'r>(
        &self,
        call: &Call<'r>,
        fresh: ServedDefinition<'r>,
        validated: Decided,
        after_running: bool,
        ctx: &Context,
    ) -> Result<Decision<'r>, HookError> {
        let Some(newer) = newer_held(call, &fresh, after_running) else {
            return Ok(Decision {
                validated,
                served: Some(fresh),
                behind: None,
            });
        };
        Ok(match self.last_good(call, ctx)? {
            Some(running) => Decision {
                validated,
                served: Some(running),
                behind: Some(newer),
            },
            None => Decision {
                validated,
                served: Some(fresh),
                behind: None,
            },
        })
    }

    /// The definition held in the observed ConfigMap, if it is one we can serve.
    fn last_good<'r>(
        &self,
        call: &Call<'r>,
        ctx: &Context,
    ) -> Result<Option<ServedDefinition<'r>>, HookError> {
        let Some(config_map) = call
            .request
            .children
            .find("ConfigMap", "v1", None, call.name)
        else {
            return Ok(None);
        };
        let Some(candidate) = held::candidate(config_map) else {
            return Ok(None);
        };
        let analysis = analysis_of(&candidate, ctx)?;
        let record = held::record(config_map);
        Ok(analysis.outcome.is_ok().then_some(ServedDefinition {
            analysis,
            candidate,
            revision: record.revision,
            made_at: record.source_time,
        }))
    }
}

/// The remembered analysis of a definition, of one file or several.
fn analysis_of(candidate: &Candidate<'_>, ctx: &Context) -> Result<Arc<Analysis>, HookError> {
    match candidate {
        Candidate::Text(text) => analysis(text, ctx),
        Candidate::Bundle(bundle) if bundle.is_single() => analysis(bundle.root_text(), ctx),
        Candidate::Bundle(bundle) => {
            // The bundle frames its parts itself.
            let mut parts = crate::hash::Stream::new();
            bundle.for_each_part(|part| parts.update(part));
            let key = StepKey {
                step: Step::BundleAnalysis,
                input: parts.finish(),
            };
            if let Some(hit) = ctx.steps.get(&key) {
                return Ok(hit);
            }
            let root = analysis(bundle.root_text(), ctx)?;
            let outcome = match (&root.outcome, bundle::recheck(bundle)) {
                (Ok(summary), Ok(elsewhere)) => Ok(definition::Summary {
                    operations: summary.operations.saturating_add(elsewhere),
                    ..summary.clone()
                }),
                (Err(invalid), _) => Err(invalid.clone()),
                (_, Err(invalid)) => Err(invalid),
            };
            let analysis = Analysis {
                sha256: bundle.sha256(),
                format: root.format,
                outcome,
            };
            Ok(ctx.steps.keep(key, analysis, definition::analysis_weight))
        }
    }
}

/// The remembered analysis of a definition's text.
fn analysis(text: &str, ctx: &Context) -> Result<Arc<Analysis>, HookError> {
    definition::remembered_analysis(&ctx.steps, text, ctx.deadline).ok_or_else(saturated)
}

/// The revision the observed ConfigMap holds (by its revision annotation), when it is of
/// the same ref of the source as `fresh` and the engine fetched `fresh` before it heard
/// of it.
fn newer_held(
    call: &Call<'_>,
    fresh: &ServedDefinition<'_>,
    after_running: bool,
) -> Option<crate::source::Revision> {
    let fresh_revision = fresh.revision.as_deref()?;
    held::running(&call.request.children, call.name)
        .filter(|running| running_is_newer(fresh_revision, running, after_running))
}

pub(super) fn valid_message(summary: &definition::Summary) -> String {
    let plural = if summary.operations == 1 { "" } else { "s" };
    let valid = format!(
        "{} {} (OpenAPI {}) with {} operation{plural} is a valid definition",
        summary.title, summary.version, summary.openapi, summary.operations
    );
    match &summary.warning {
        Some(warning) => format!("{valid}; warning: {warning}"),
        None => valid,
    }
}

pub(super) fn definition_status(analysis: &Analysis) -> Option<DefinitionStatus> {
    analysis
        .outcome
        .as_ref()
        .ok()
        .map(|summary| DefinitionStatus {
            version: summary.version.clone(),
            openapi: summary.openapi.clone(),
            title: summary.title.clone(),
            operations: summary.operations,
            sha256: analysis.sha256.clone(),
        })
}

/// No heavy-validation slot came free before the call's deadline (the server has answered
/// 503 by then; this only stops work nobody waits for).
fn saturated() -> HookError {
    HookError::Saturated
}
