//! Config files: YAML documents read by the config loader, with `${env:...}`
//! references resolved against a fixed environment; read or refused with at least
//! one error, and what is read summarises and lists its pipelines.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::Config;

fn lookup(name: &str) -> Option<String> {
    match name {
        "HTTP_PORT" => Some("4318".to_string()),
        "EMPTY" => Some(String::new()),
        "BRACES" => Some("}${env:HTTP_PORT}$".to_string()),
        "YAML" => Some("{a: [1, 2]}".to_string()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_yaml(text, &lookup) {
        Ok(config) => {
            config.summary();
            for pipeline in config.pipelines() {
                let _ = (pipeline.id, pipeline.kind);
            }
            config.signal_exporters().count();
        }
        Err(errors) => assert!(!errors.0.is_empty()),
    }
});
