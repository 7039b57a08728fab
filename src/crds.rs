//! CustomResourceDefinitions generated from the Rust spec types. `metahooks crds` prints
//! them and a test keeps `manifests/crds/` equal to the output.

use kube::CustomResourceExt;

use crate::controllers::apimock::spec::ApiMock;
use crate::controllers::monitoredservice::spec::MonitoredService;

/// Each CRD as (file name under `manifests/crds/`, YAML).
///
/// # Errors
/// A CRD does not serialise to YAML (a bug in a spec type).
pub fn all() -> Result<Vec<(&'static str, String)>, crate::yaml::Error> {
    Ok(vec![
        (
            "apimocks.apirator.io.yaml",
            crate::yaml::to_string(&ApiMock::crd())?,
        ),
        (
            "monitoredservices.metahooks.io.yaml",
            crate::yaml::to_string(&in_group(MonitoredService::crd(), PRODUCTION_GROUP))?,
        ),
        (
            "config-monitor/monitoredservices.services.example.com.yaml",
            crate::yaml::to_string(&MonitoredService::crd())?,
        ),
    ])
}

/// The group MonitoredService is served in for new installations; config-monitor's
/// `services.example.com` is the opt-in for adopting its CRs unchanged.
pub const PRODUCTION_GROUP: &str = "metahooks.io";

/// The same CRD served in another API group (same kind, versions and schema).
fn in_group(
    mut crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    group: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    crd.metadata.name = Some(format!("{}.{group}", crd.spec.names.plural));
    crd.spec.group = group.to_owned();
    crd
}

/// All CRDs as one multi-document YAML stream.
///
/// # Errors
/// As [`all`].
pub fn all_yaml() -> Result<String, crate::yaml::Error> {
    let mut out = String::new();
    for (_, yaml) in all()? {
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok(out)
}
