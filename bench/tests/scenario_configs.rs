//! Every scenario's generated opscope config is one the agent accepts.

use opscope::config::Config;
use opscope_bench::scenario;

#[test]
fn every_scenario_config_is_valid() {
    for scenario in scenario::all() {
        let yaml = scenario.opscope_config(14317, 14318, 14319);
        if let Err(errors) = Config::from_yaml(&yaml, &|_| None) {
            panic!("{}: {errors}\n{yaml}", scenario.name);
        }
    }
}
