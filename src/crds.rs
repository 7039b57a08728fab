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
            "monitoredservices.services.example.com.yaml",
            crate::yaml::to_string(&MonitoredService::crd())?,
        ),
    ])
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
