//! The objects one APIMock asks for: ConfigMap (the definition), Deployment (the mock
//! server), Service, and an Ingress when `spec.ingress` is set. All are named after the
//! parent and carry only fields we own; Metacontroller adds namespace and owner.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    KeyToPath, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SecurityContext, Service,
    ServicePort, ServiceSpec as K8sServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec as K8sIngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;

use super::bundle::Bundle;
use super::definition::Format;
use super::spec::{ApiMockSpec, ExternalTrafficPolicy, MockSpec, ServiceType};
use crate::controllers::common::held_files;
use crate::controllers::common::names::{self, child_labels};
use crate::controllers::common::restricted;
use crate::error::HookError;

/// Pod-template annotation holding the definition's SHA-256: an edit changes the
/// template, so the Deployment rolls (APIrator never restarted the pods of an edited mock).
pub const DEFINITION_HASH_ANNOTATION: &str = "apimock.metahooks.io/definition-sha256";
/// Asks cert-manager (its ingress-shim, with the default issuer) for the Ingress's
/// certificate; set for `ingress.certManager: true`.
pub const TLS_ACME_ANNOTATION: &str = "kubernetes.io/tls-acme";
/// Port Prism listens on in the pod.
pub const MOCK_PORT: i32 = 4010;
/// Port the Swagger UI listens on.
pub const DOCS_PORT: i32 = 8080;
/// Service port when `service.port` is unset.
pub const DEFAULT_SERVICE_PORT: i32 = 8000;
const SPEC_DIR: &str = "/spec";
/// The user the mock runs as: `node` (uid and gid 1000) of the Node.js Alpine image
/// Prism's image is built on, which otherwise starts as root.
pub const PRISM_USER: i64 = 1000;
/// The user the Swagger UI runs as: `nginx` (uid and gid 101) of the nginx Alpine image
/// it is built on.
pub const SWAGGER_UI_USER: i64 = 101;

/// Everything the builders need, decided by `sync` beforehand.
pub struct Plan<'a> {
    /// The APIMock's name (every child's name).
    pub name: &'a str,
    /// The spec.
    pub spec: &'a ApiMockSpec,
    /// The definition actually served (the spec's or the source's, or the last good one).
    pub served: ServedFiles<'a>,
    /// Hash of what is served (pod-template annotation).
    pub sha256: &'a str,
    /// The source's revision of what is served, for definitions read from a source.
    pub revision: Option<&'a crate::source::Revision>,
    /// When the source made that revision (seconds since the epoch; git only).
    pub made_at: Option<i64>,
    /// The mock-server image.
    pub image: &'a str,
    /// The Swagger UI image.
    pub docs_image: &'a str,
}

/// One document (as written in the spec, or one file read from a source), or a root
/// document with the files it refers to.
#[derive(Clone, Copy)]
pub enum ServedFiles<'a> {
    /// One document.
    Text {
        /// The document.
        text: &'a str,
        /// How it is written (names the file).
        format: Format,
    },
    /// A root document and the files it refers to.
    Bundle(&'a Bundle),
}

impl ServedFiles<'_> {
    /// The root document's path under the mount.
    pub fn root_path(&self) -> &str {
        match self {
            ServedFiles::Text { format, .. } => format.file_name(),
            ServedFiles::Bundle(bundle) => &bundle.root,
        }
    }
}

/// Labels of every child of the APIMock `name`.
pub fn labels(name: &str) -> BTreeMap<String, String> {
    child_labels("apimock", name)
}

fn selector_labels(name: &str) -> BTreeMap<String, String> {
    names::selector_labels("apimock", name)
}

fn metadata(name: &str, annotations: Option<BTreeMap<String, String>>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels(name)),
        annotations: annotations.filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

/// All children, in a fixed order.
pub fn build(plan: &Plan<'_>) -> Result<Vec<Value>, HookError> {
    let mut children = vec![
        to_value(&config_map(plan))?,
        to_value(&deployment(plan))?,
        to_value(&service(plan))?,
    ];
    if let Some(ingress) = ingress(plan) {
        children.push(to_value(&ingress)?);
    }
    Ok(children)
}

fn to_value<T: Serialize>(object: &T) -> Result<Value, HookError> {
    serde_json::to_value(object).map_err(crate::error::Fault::serialise("a child object"))
}

/// The ConfigMap holding the served definition, with what reads it back
/// ([`held_files::APIMOCK`]): the source's revision (so a replica that has not fetched
/// yet still reports what runs), when the source made it (so replicas agree which of two
/// copies of a ref is newer), and a multi-file definition's root and renamed paths.
pub fn config_map(plan: &Plan<'_>) -> ConfigMap {
    let mut record = held_files::Record {
        revision: plan.revision.cloned(),
        source_time: plan.made_at,
        ..held_files::Record::default()
    };
    let data = match plan.served {
        ServedFiles::Text { text, format } => {
            BTreeMap::from([(format.file_name().to_owned(), text.to_owned())])
        }
        ServedFiles::Bundle(bundle) => {
            record.root = Some(bundle.root.clone());
            record.paths = bundle
                .keys()
                .filter(|(key, path)| key != path)
                .map(|(key, path)| (key, path.to_owned()))
                .collect();
            bundle
                .keys()
                .filter_map(|(key, path)| Some((key, bundle.files.get(path)?.clone())))
                .collect()
        }
    };
    let annotations = record.annotations(&held_files::APIMOCK);
    ConfigMap {
        metadata: metadata(plan.name, Some(annotations)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// Every file at its path: ConfigMap keys cannot hold the slashes of `schemas/pet.yaml`.
fn volume_items(served: ServedFiles<'_>) -> Option<Vec<KeyToPath>> {
    let ServedFiles::Bundle(bundle) = served else {
        return None;
    };
    Some(
        bundle
            .keys()
            .map(|(key, path)| KeyToPath {
                key,
                path: path.to_owned(),
                mode: None,
            })
            .collect(),
    )
}

/// The mock-server Deployment (and the Swagger UI beside it when asked for).
pub fn deployment(plan: &Plan<'_>) -> Deployment {
    let spec_file = format!("{SPEC_DIR}/{}", plan.served.root_path());
    let mut containers = vec![mock_container(plan, &spec_file)];
    if docs_enabled(plan.spec) {
        containers.push(docs_container(plan, &spec_file));
    }
    let mut template_labels = labels(plan.name);
    template_labels.extend(selector_labels(plan.name));
    Deployment {
        metadata: metadata(plan.name, None),
        spec: Some(DeploymentSpec {
            replicas: Some(plan.spec.replicas.unwrap_or(1)),
            selector: LabelSelector {
                match_labels: Some(selector_labels(plan.name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(template_labels),
                    annotations: Some(BTreeMap::from([(
                        DEFINITION_HASH_ANNOTATION.to_owned(),
                        plan.sha256.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers,
                    volumes: Some(vec![
                        Volume {
                            name: "definition".to_owned(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: plan.name.to_owned(),
                                items: volume_items(plan.served),
                                ..ConfigMapVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                        Volume {
                            name: "tmp".to_owned(),
                            empty_dir: Some(EmptyDirVolumeSource {
                                size_limit: Some(Quantity("64Mi".to_owned())),
                                ..EmptyDirVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                    ]),
                    security_context: Some(restricted::pod(Some(PRISM_USER))),
                    // Neither Prism nor the Swagger UI talks to the API server.
                    automount_service_account_token: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// Prism is started with the image's own entrypoint (`prism`), so the arguments are
/// exactly what `prism` takes on the command line; the local end-to-end test runs them.
pub fn mock_args(spec_file: &str, mock: Option<&MockSpec>) -> Vec<String> {
    let mut args: Vec<String> = ["mock", "-h", "0.0.0.0", "-p", &MOCK_PORT.to_string()]
        .map(str::to_owned)
        .to_vec();
    args.extend(mock.map(MockSpec::prism_flags).unwrap_or_default());
    args.push(spec_file.to_owned());
    args
}

fn mock_container(plan: &Plan<'_>, spec_file: &str) -> Container {
    Container {
        name: "mock".to_owned(),
        image: Some(plan.image.to_owned()),
        args: Some(mock_args(spec_file, plan.spec.mock.as_ref())),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_owned()),
            container_port: MOCK_PORT,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        // Prism has no health route; an open port means the document was loaded.
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("http".to_owned()),
                ..TCPSocketAction::default()
            }),
            initial_delay_seconds: Some(2),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        resources: Some(
            plan.spec
                .resources
                .clone()
                .unwrap_or_else(default_resources),
        ),
        volume_mounts: Some(vec![
            spec_mount(),
            VolumeMount {
                name: "tmp".to_owned(),
                mount_path: "/tmp".to_owned(),
                ..VolumeMount::default()
            },
        ]),
        // Prism reads its document and writes nothing but temporary files.
        security_context: Some(restricted::container(true)),
        ..Container::default()
    }
}

fn docs_container(plan: &Plan<'_>, spec_file: &str) -> Container {
    Container {
        name: "docs".to_owned(),
        image: Some(plan.docs_image.to_owned()),
        env: Some(vec![
            EnvVar {
                name: "SWAGGER_JSON".to_owned(),
                value: Some(spec_file.to_owned()),
                ..EnvVar::default()
            },
            EnvVar {
                name: "PORT".to_owned(),
                value: Some(DOCS_PORT.to_string()),
                ..EnvVar::default()
            },
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("docs".to_owned()),
            container_port: DOCS_PORT,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        resources: Some(default_resources()),
        volume_mounts: Some(vec![spec_mount()]),
        // The image's entrypoint rewrites its nginx configuration and page at start (in
        // directories the image makes writable for any user), so the root filesystem
        // stays writable; the user is nginx's, not Prism's.
        security_context: Some(SecurityContext {
            run_as_user: Some(SWAGGER_UI_USER),
            run_as_group: Some(SWAGGER_UI_USER),
            ..restricted::container(false)
        }),
        ..Container::default()
    }
}

fn spec_mount() -> VolumeMount {
    VolumeMount {
        name: "definition".to_owned(),
        mount_path: SPEC_DIR.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// Small requests with room to burst: Prism is a Node process, and APIrator's 10Mi
/// limit was an OOM waiting to happen.
fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("50m".to_owned())),
            ("memory".to_owned(), Quantity("128Mi".to_owned())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_owned(),
            Quantity("512Mi".to_owned()),
        )])),
        ..ResourceRequirements::default()
    }
}

fn docs_enabled(spec: &ApiMockSpec) -> bool {
    spec.docs.as_ref().is_some_and(|d| d.enabled)
}

/// The Service's port.
pub fn service_port(spec: &ApiMockSpec) -> i32 {
    spec.service
        .as_ref()
        .and_then(|s| s.port)
        .unwrap_or(DEFAULT_SERVICE_PORT)
}

/// The Service in front of the mock.
pub fn service(plan: &Plan<'_>) -> Service {
    let service_spec = plan.spec.service.clone().unwrap_or_default();
    let type_ = service_spec.type_.unwrap_or_default();
    let mut ports = vec![ServicePort {
        name: Some("http".to_owned()),
        port: service_port(plan.spec),
        target_port: Some(IntOrString::String("http".to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    }];
    if docs_enabled(plan.spec) {
        ports.push(ServicePort {
            name: Some("docs".to_owned()),
            port: DOCS_PORT,
            target_port: Some(IntOrString::String("docs".to_owned())),
            protocol: Some("TCP".to_owned()),
            ..ServicePort::default()
        });
    }
    // The API server refuses externalTrafficPolicy on ClusterIP Services.
    let external_traffic_policy = service_spec
        .external_traffic_policy
        .filter(|_| type_ != ServiceType::ClusterIP)
        .map(ExternalTrafficPolicy::as_str)
        .map(str::to_owned);
    Service {
        metadata: metadata(plan.name, service_spec.annotations),
        spec: Some(K8sServiceSpec {
            type_: Some(type_.as_str().to_owned()),
            selector: Some(selector_labels(plan.name)),
            ports: Some(ports),
            external_traffic_policy,
            ..K8sServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The Ingress, when `spec.ingress` asks for one.
pub fn ingress(plan: &Plan<'_>) -> Option<Ingress> {
    let wanted = plan.spec.ingress.as_ref()?;
    let path = if wanted.path.is_empty() {
        "/".to_owned()
    } else {
        wanted.path.clone()
    };
    let host = Some(wanted.hostname.clone()).filter(|h| !h.is_empty());
    let cert_manager = wanted.cert_manager == Some(true);
    let mut annotations = wanted.annotations.clone().unwrap_or_default();
    if cert_manager {
        // cert-manager's ingress-shim issues a certificate for an Ingress carrying this
        // annotation (with its default issuer) into the TLS entry's Secret.
        annotations
            .entry(TLS_ACME_ANNOTATION.to_owned())
            .or_insert_with(|| "true".to_owned());
    }
    let tls_secret = match (&wanted.tls, cert_manager) {
        (Some(tls), _) => Some(tls.secret_name.clone()),
        (None, true) => Some(format!("{}-tls", plan.name)),
        (None, false) => None,
    };
    Some(Ingress {
        metadata: metadata(plan.name, Some(annotations)),
        spec: Some(K8sIngressSpec {
            ingress_class_name: wanted.class_name.clone(),
            rules: Some(vec![IngressRule {
                host: host.clone(),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(path),
                        path_type: wanted.path_type.unwrap_or_default().as_str().to_owned(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: plan.name.to_owned(),
                                port: Some(ServiceBackendPort {
                                    name: Some("http".to_owned()),
                                    ..ServiceBackendPort::default()
                                }),
                            }),
                            ..IngressBackend::default()
                        },
                    }],
                }),
            }]),
            tls: tls_secret.map(|secret_name| {
                vec![IngressTLS {
                    hosts: host.map(|h| vec![h]),
                    secret_name: Some(secret_name),
                }]
            }),
            ..K8sIngressSpec::default()
        }),
        ..Ingress::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::apimock::spec::{IngressSpec, IngressTls};

    fn ingress_for(wanted: IngressSpec) -> Option<Ingress> {
        let spec = ApiMockSpec {
            ingress: Some(wanted),
            ..ApiMockSpec::default()
        };
        ingress(&Plan {
            name: "pets",
            spec: &spec,
            served: ServedFiles::Text {
                text: "",
                format: Format::Yaml,
            },
            sha256: "",
            revision: None,
            made_at: None,
            image: "",
            docs_image: "",
        })
    }

    #[test]
    fn cert_manager_asks_for_a_certificate_into_the_tls_secret() {
        let plain = IngressSpec {
            hostname: "pets.example.com".to_owned(),
            path: "/".to_owned(),
            ..IngressSpec::default()
        };
        let without = ingress_for(plain.clone());
        assert!(
            without
                .as_ref()
                .and_then(|i| i.metadata.annotations.as_ref())
                .is_none()
        );
        assert!(without.and_then(|i| i.spec).and_then(|s| s.tls).is_none());

        let managed = ingress_for(IngressSpec {
            cert_manager: Some(true),
            ..plain.clone()
        });
        let annotations = managed
            .as_ref()
            .and_then(|i| i.metadata.annotations.clone());
        assert_eq!(
            annotations
                .and_then(|a| a.get(TLS_ACME_ANNOTATION).cloned())
                .as_deref(),
            Some("true")
        );
        let tls = managed
            .and_then(|i| i.spec)
            .and_then(|s| s.tls)
            .unwrap_or_default();
        assert_eq!(
            tls.first().and_then(|t| t.secret_name.as_deref()),
            Some("pets-tls")
        );

        // The user's own Secret and annotation win.
        let own = ingress_for(IngressSpec {
            cert_manager: Some(true),
            tls: Some(IngressTls {
                secret_name: "mine".to_owned(),
            }),
            annotations: Some(BTreeMap::from([(
                TLS_ACME_ANNOTATION.to_owned(),
                "false".to_owned(),
            )])),
            ..plain
        });
        let annotations = own.as_ref().and_then(|i| i.metadata.annotations.clone());
        assert_eq!(
            annotations
                .and_then(|a| a.get(TLS_ACME_ANNOTATION).cloned())
                .as_deref(),
            Some("false")
        );
        let tls = own
            .and_then(|i| i.spec)
            .and_then(|s| s.tls)
            .unwrap_or_default();
        assert_eq!(
            tls.first().and_then(|t| t.secret_name.as_deref()),
            Some("mine")
        );
    }
}
