//! What a component table's rows become (the tables are `components.rs`): for each
//! component kind, an enum of the settings of its types, their type names and
//! parsing, and what the config and the service ask of a component (what a receiver
//! produces and how it starts, what an exporter carries and how it is built, what a
//! connector takes and feeds). The processor and connector tables are also read by
//! the modules that build those components, with macros of their own.

/// Declares the types of one component kind, one row each: the type name written in
/// the config, the variant and its settings, and how they are checked once read
/// (the settings' `Validate` unless the row says otherwise). Generates the enum,
/// its list of type names and its parsing.
macro_rules! component_types {
    (
        $(#[$meta:meta])*
        $what:literal: $kind:ident {
            $($type_name:literal => $variant:ident($config:ty) $(checked by $check:expr)?,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub enum $kind {
            $($variant($config),)+
        }

        impl $kind {
            pub const TYPES: &'static [&'static str] = &[$($type_name),+];

            pub fn parse(
                kind: &str,
                value: ::serde_json::Value,
                path: &str,
            ) -> Result<Self, Vec<::opscope_model::config::FieldError>> {
                match kind {
                    $($type_name => $crate::config::settings::read(
                        value,
                        path,
                        $crate::config::component_types::component_types!(@check $config $(, $check)?),
                    )
                    .map(Self::$variant),)+
                    _ => Err(vec![$crate::config::settings::unknown($what, kind, Self::TYPES, path)]),
                }
            }

            /// The type name the component is written with.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $type_name,)+
                }
            }
        }
    };
    (@check $config:ty) => { <$config as ::opscope_model::config::Validate>::validate };
    (@check $config:ty, $check:expr) => { $check };
}
pub(crate) use component_types;

/// Reads the receiver table: as [`component_types!`], plus the signal types each
/// receiver produces (`feeds`) and the function that starts it (`start`).
macro_rules! receiver_types {
    ($($type_name:literal => $variant:ident($config:ty) {
        feeds: [$($kind:ident),+],
        start: $start:path $(,)?
    })+) => {
        $crate::config::component_types::component_types! {
            "receiver": ReceiverConfig {
                $($type_name => $variant($config),)+
            }
        }

        impl ReceiverConfig {
            /// Whether the receiver produces data of this signal type.
            pub fn feeds(&self, kind: ::opscope_model::TelemetryKind) -> bool {
                match self {
                    $(Self::$variant(_) => [$(::opscope_model::TelemetryKind::$kind),+].contains(&kind),)+
                }
            }

            /// Binds the receiver's listeners (so a port in use fails the start) and
            /// spawns its servers into `tasks`; they end after the context's
            /// `shutdown` fires and in-flight requests are answered.
            pub async fn start(
                &self,
                context: $crate::receivers::ReceiverContext,
                tasks: &mut ::tokio::task::JoinSet<()>,
            ) -> Result<(), $crate::receivers::ReceiverError> {
                match self {
                    $(Self::$variant(config) => Ok($start(config, context, tasks).await?),)+
                }
            }
        }
    };
}
pub(crate) use receiver_types;

/// Reads the processor table for the settings (the building is
/// `pipeline/processors/`'s).
macro_rules! processor_types {
    ($($type_name:literal => $variant:ident($config:ty) { build: $build:path $(,)? })+) => {
        $crate::config::component_types::component_types! {
            "processor": ProcessorConfig {
                $($type_name => $variant($config),)+
            }
        }
    };
}
pub(crate) use processor_types;

/// Reads the exporter table: as [`component_types!`], plus how each exporter is
/// built from its name, settings and the agent's telemetry (`build`), the settings
/// that hold its queue and retry settings (`queue`, `retry`; the defaults when the
/// row has none) and what it carries (decoded OTLP, OTLP `Encoded` for those that
/// send it on as it is, signals).
macro_rules! exporter_types {
    (
        $($type_name:literal => $variant:ident($config:ty) {
            $(check: $check:expr,)?
            build: $build:expr,
            $(queue: $queue:ident, retry: $retry:ident,)?
            carries: [$($data:ty),+ $(,)?] $(,)?
        })+
    ) => {
        $crate::config::component_types::component_types! {
            "exporter": ExporterConfig {
                $($type_name => $variant($config) $(checked by $check)?,)+
            }
        }

        impl ExporterConfig {
            /// Whether the exporter can take what a pipeline carries.
            pub fn carries(&self, carried: $crate::sending::Carried) -> bool {
                match self {
                    $(Self::$variant(_) => [
                        $(<$data as $crate::sending::CarriedAs>::CARRIED),+
                    ].contains(&carried),)+
                }
            }

            /// Builds the exporter `name` (binding the endpoint of one that serves one).
            pub fn build(
                &self,
                name: &str,
                telemetry: &$crate::self_telemetry::SelfTelemetry,
            ) -> Result<$crate::sending::BuiltExporter, ::opscope_model::config::FieldError> {
                match self {
                    $(Self::$variant(config) => {
                        let built: Result<_, ::opscope_model::config::FieldError> =
                            ($build)(name, config, telemetry);
                        let exporter = ::std::sync::Arc::new(built?);
                        let (queue, retry) = $crate::config::component_types::exporter_types!(
                            @queue config $(, $queue, $retry)?
                        );
                        Ok($crate::sending::BuiltExporter::new(queue, retry)
                            .holding(&exporter)
                            $(.carrying::<$data, _>(&exporter))+)
                    })+
                }
            }
        }
    };
    (@queue $config:ident) => {
        (
            ::opscope_exporters::QueueConfig::default(),
            ::opscope_exporters::RetryConfig::default(),
        )
    };
    (@queue $config:ident, $queue:ident, $retry:ident) => {
        ($config.$queue.clone(), $config.$retry.clone())
    };
}
pub(crate) use exporter_types;

/// Reads the connector table for the settings and for what pipelines may list each
/// connector: the signal types of the pipelines it is an exporter of (`takes`) and
/// a receiver of (`feeds`). The building is `connectors/`'s.
macro_rules! connector_types {
    ($($type_name:literal => $variant:ident($config:ty) {
        takes: [$($taken:ident),+],
        feeds: [$($fed:ident),+],
        build: $build:path $(,)?
    })+) => {
        $crate::config::component_types::component_types! {
            /// Components that are an exporter of some pipelines and a receiver of others.
            "connector": ConnectorConfig {
                $($type_name => $variant($config),)+
            }
        }

        impl ConnectorConfig {
            /// The signal types of the pipelines that may list the connector as an
            /// exporter.
            pub fn kinds_taken(&self) -> &'static [::opscope_model::TelemetryKind] {
                match self {
                    $(Self::$variant(_) => &[$(::opscope_model::TelemetryKind::$taken),+],)+
                }
            }

            /// The signal types of the pipelines that may list the connector as a
            /// receiver: the pipelines it feeds.
            pub fn kinds_fed(&self) -> &'static [::opscope_model::TelemetryKind] {
                match self {
                    $(Self::$variant(_) => &[$(::opscope_model::TelemetryKind::$fed),+],)+
                }
            }

            /// Whether pipelines of this type may list the connector as an exporter.
            pub fn takes(&self, kind: ::opscope_model::TelemetryKind) -> bool {
                self.kinds_taken().contains(&kind)
            }

            /// Whether pipelines of this type may list the connector as a receiver.
            pub fn feeds(&self, kind: ::opscope_model::TelemetryKind) -> bool {
                self.kinds_fed().contains(&kind)
            }
        }
    };
}
pub(crate) use connector_types;
