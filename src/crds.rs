//! CustomResourceDefinitions generated from the Rust spec types. `metahooks crds` prints
//! them and a test keeps `manifests/crds/` equal to the output.

use kube::CustomResourceExt;
use schemars::Schema;
use serde_json::json;

use crate::controllers::apimock::spec::ApiMock;
use crate::controllers::monitoredservice::spec::MonitoredService;

/// Each CRD as (file name under `manifests/crds/`, YAML).
pub fn all() -> anyhow::Result<Vec<(&'static str, String)>> {
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
pub fn all_yaml() -> anyhow::Result<String> {
    let mut out = String::new();
    for (_, yaml) in all()? {
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok(out)
}

/// `metav1.Condition` list, merged by `type` (as `kubectl` and SSA expect).
pub fn conditions_schema(_: &mut schemars::SchemaGenerator) -> Schema {
    let schema = json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string", "maxLength": 1024},
                "message": {"type": "string", "maxLength": 32768},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0}
            }
        }
    });
    Schema::try_from(schema).unwrap_or_default()
}
