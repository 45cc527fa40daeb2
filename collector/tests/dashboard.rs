//! The Grafana dashboard `deploy/grafana/opscope-operators.json`: importable shape
//! (inputs, datasource references, variables), the four quadrants (the API-writes one
//! with the kernel probe's connection failures and send rate per pod), the links into the
//! drill-down, and every PromQL query it makes run against a real Prometheus (2 from
//! Debian, 3 from its module) that scrapes `opscope demo` and evaluates
//! `deploy/prometheus/rules.yaml`, whose expressions are run too.
//!
//! LogQL has no server here: its queries are checked by a small hand-written reader
//! of the stream selector and label-filter pipeline the dashboard uses.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::Opscope;
use opscope_testkit::backend::http_client;
use opscope_testkit::prometheus::{PrometheusServer, prometheus_or_skip, prometheus3_or_skip};
use serde_json::Value;

const DASHBOARD: &str = "deploy/grafana/opscope-operators.json";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo(DASHBOARD)).expect("the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

fn panels(dashboard: &Value) -> Vec<&Value> {
    dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect()
}

fn targets(panel: &Value) -> Vec<&Value> {
    panel["targets"].as_array().into_iter().flatten().collect()
}

fn exprs(panel: &Value) -> Vec<String> {
    targets(panel)
        .iter()
        .filter_map(|t| t["expr"].as_str().map(String::from))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Quadrant {
    TopLeft,
    TopRight,
    BottomLeft,
    BottomRight,
}

/// Top: rows 0 to 15; left: columns 0 to 11 (of Grafana's 24).
fn quadrant(panel: &Value) -> Quadrant {
    let at = |key: &str| panel["gridPos"][key].as_u64().expect("gridPos");
    let (x, y, w, h) = (at("x"), at("y"), at("w"), at("h"));
    let left = x + w <= 12;
    let top = y + h <= 16;
    assert!(
        (left || x >= 12) && (top || y >= 16),
        "panel {} straddles quadrants",
        panel["title"]
    );
    match (top, left) {
        (true, true) => Quadrant::TopLeft,
        (true, false) => Quadrant::TopRight,
        (false, true) => Quadrant::BottomLeft,
        (false, false) => Quadrant::BottomRight,
    }
}

fn in_quadrant(dashboard: &Value, wanted: Quadrant) -> Vec<&Value> {
    panels(dashboard)
        .into_iter()
        .filter(|p| quadrant(p) == wanted)
        .collect()
}

fn has_panel(panels: &[&Value], kind: &str, expr_part: &str) -> bool {
    panels
        .iter()
        .any(|p| p["type"] == kind && exprs(p).iter().any(|e| e.contains(expr_part)))
}

#[test]
fn it_is_importable_with_inputs_for_its_three_datasources() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64() >= Some(39));
    assert_eq!(dashboard["uid"], "opscope-operators");
    let inputs: BTreeSet<&str> = dashboard["__inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(
        inputs,
        BTreeSet::from(["DS_PROMETHEUS", "DS_LOKI", "DS_JAEGER"])
    );
    let expected = [
        ("prometheus", "${DS_PROMETHEUS}"),
        ("loki", "${DS_LOKI}"),
        ("jaeger", "${DS_JAEGER}"),
    ];
    for panel in panels(&dashboard) {
        for source in std::iter::once(&panel["datasource"])
            .chain(targets(panel).into_iter().map(|t| &t["datasource"]))
        {
            let pair = (
                source["type"].as_str().unwrap_or_default(),
                source["uid"].as_str().unwrap_or_default(),
            );
            assert!(
                expected.contains(&pair),
                "panel {}: datasource {source}",
                panel["title"]
            );
        }
    }
}

/// Grafana's published schema (grafana-foundation-sdk's dashboard model, generated
/// from Grafana's own), decoded strictly by `grafana-dashboard-check`: an unknown or
/// missing required field anywhere, each panel's options by its plugin's schema, is
/// refused. A copy with one unknown option shows that it is.
#[test]
fn it_matches_grafanas_published_schema() {
    let Some(check) =
        opscope_testkit::backend::built_or_skip("grafana-dashboard-check", "grafana-schema")
    else {
        return;
    };
    let run = |path: &Path| {
        std::process::Command::new(&check)
            .arg(path)
            .output()
            .expect("grafana-dashboard-check runs")
    };
    let output = run(&repo(DASHBOARD));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    println!("{}", said.trim());

    let mut broken = dashboard();
    broken["panels"][2]["options"]["unknownOption"] = Value::from(true);
    let dir = opscope_testkit::backend::temp_dir("opscope-dashboard");
    let path = dir.path().join("broken.json");
    std::fs::write(&path, broken.to_string()).expect("the broken copy");
    let output = run(&path);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a broken copy passed");
    assert!(said.contains("unknownOption"), "{said}");
}

#[test]
fn it_has_the_operator_and_namespace_variables() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("variable {name}"))
    };
    for name in ["operator_name", "k8s_namespace"] {
        let v = variable(name);
        assert_eq!(v["type"], "query");
        assert_eq!(v["datasource"]["uid"], "${DS_PROMETHEUS}");
        let query = v["query"]["query"].as_str().unwrap_or_default();
        assert!(query.starts_with("label_values("), "{query}");
        assert!(query.ends_with(&format!(", {name})")), "{query}");
    }
    for name in ["reconcile_id", "k8s_object", "trace_id"] {
        assert_eq!(variable(name)["type"], "textbox");
    }
}

#[test]
fn its_four_quadrants_hold_what_they_are_for() {
    let dashboard = dashboard();
    let top_left = in_quadrant(&dashboard, Quadrant::TopLeft);
    assert!(has_panel(
        &top_left,
        "heatmap",
        "opscope_reconcile_duration_seconds_bucket"
    ));
    assert!(has_panel(
        &top_left,
        "timeseries",
        "opscope:reconcile_duration_seconds:p99_5m"
    ));

    let top_right = in_quadrant(&dashboard, Quadrant::TopRight);
    let writes = top_right
        .iter()
        .find(|p| {
            exprs(p).iter().any(|e| {
                e.contains("sum by (verb, code)") && e.contains("opscope_api_writes_total")
            })
        })
        .expect("write rate by verb and code");
    let conflicts_highlighted = writes["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| {
            o["matcher"]["options"]
                .as_str()
                .is_some_and(|m| m.contains("409"))
                && o["properties"].to_string().contains("red")
        });
    assert!(conflicts_highlighted, "409s are highlighted");
    assert!(has_panel(
        &top_right,
        "timeseries",
        "rest_client_request_duration_seconds_bucket"
    ));
    // The kernel probe's series, as the prometheus exporters name its OTLP sums.
    assert!(has_panel(
        &top_right,
        "heatmap",
        "opscope_ebpf_api_server_connections_total{outcome!=\"established\"}"
    ));
    assert!(has_panel(
        &top_right,
        "timeseries",
        "opscope_ebpf_api_server_send_calls_total"
    ));

    let bottom_left = in_quadrant(&dashboard, Quadrant::BottomLeft);
    assert!(has_panel(&bottom_left, "table", "opscope_signal_active"));
    assert!(has_panel(
        &bottom_left,
        "state-timeline",
        "opscope_signal_active"
    ));

    let bottom_right = in_quadrant(&dashboard, Quadrant::BottomRight);
    assert!(has_panel(&bottom_right, "logs", "reconcile_id"));
    assert!(
        bottom_right
            .iter()
            .any(|p| p["type"] == "traces" && targets(p)[0]["query"] == "$trace_id")
    );
}

/// Every link of a panel's fields.
fn links(panel: &Value) -> Vec<String> {
    panel["fieldConfig"]["defaults"]["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["url"].as_str().map(String::from))
        .collect()
}

#[test]
fn the_other_panels_link_into_the_drill_down() {
    let dashboard = dashboard();
    let variables: BTreeSet<&str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let mut carried = BTreeSet::new();
    for panel in panels(&dashboard) {
        for url in links(panel) {
            assert!(
                url.starts_with("/d/opscope-operators/"),
                "{url}: into this dashboard"
            );
            for part in url.split(['?', '&']).skip(1) {
                if let Some((name, value)) =
                    part.strip_prefix("var-").and_then(|p| p.split_once('='))
                {
                    assert!(variables.contains(name), "{url}: no variable {name}");
                    carried.insert((name.to_string(), value.to_string()));
                }
            }
        }
    }
    for (variable, field) in [
        ("reconcile_id", "${__data.fields.reconcile_id}"),
        ("trace_id", "${__data.fields.trace_id}"),
        ("operator_name", "${__data.fields.operator_name}"),
    ] {
        assert!(
            carried.contains(&(variable.to_string(), field.to_string())),
            "a link sets {variable} from {field}: {carried:?}"
        );
    }
    let duration = panels(&dashboard)
        .into_iter()
        .find(|p| p["type"] == "heatmap")
        .expect("the heatmap");
    assert!(
        links(duration)
            .iter()
            .any(|l| l.contains("var-trace_id=${__data.fields.trace_id}")),
        "the duration exemplars lead to their trace"
    );
    assert!(
        targets(duration)[0]["exemplar"] == true,
        "exemplars are shown"
    );
}

/// A LogQL query of the shape the dashboard uses: a stream selector of label
/// matchers, then `| label op "value"` filters. Returns the labels it filters on.
fn read_logql(query: &str) -> Result<Vec<String>, String> {
    let query = query.trim();
    let rest = query
        .strip_prefix('{')
        .ok_or("starts with a stream selector")?;
    let (selector, mut rest) = rest.split_once('}').ok_or("selector is closed")?;
    let mut labels = Vec::new();
    for matcher in selector.split(',') {
        labels.push(read_matcher(matcher.trim())?);
    }
    while !rest.trim().is_empty() {
        let stage = rest
            .trim_start()
            .strip_prefix('|')
            .ok_or(format!("a pipeline stage starts with |: {rest}"))?;
        let (filter, after) = match stage.find(" |") {
            Some(end) => stage.split_at(end),
            None => (stage, ""),
        };
        labels.push(read_matcher(filter.trim())?);
        rest = after;
    }
    Ok(labels)
}

/// `label op "value"` with op one of `=`, `!=`, `=~`, `!~`.
fn read_matcher(matcher: &str) -> Result<String, String> {
    let name_end = matcher
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .ok_or(format!("{matcher}: no operator"))?;
    let (name, rest) = matcher.split_at(name_end);
    let ok_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let value = ["=~", "!~", "!=", "="]
        .iter()
        .find_map(|op| rest.trim_start().strip_prefix(op))
        .ok_or(format!("{matcher}: no operator"))?
        .trim();
    let quoted = value.len() >= 2
        && value.starts_with('"')
        && value.ends_with('"')
        && !value[1..value.len() - 1].contains('"');
    if ok_name && quoted {
        Ok(name.to_string())
    } else {
        Err(format!("{matcher}: not label op \"value\""))
    }
}

#[test]
fn the_logql_queries_are_well_formed() {
    let dashboard = dashboard();
    let mut seen = 0;
    for panel in panels(&dashboard) {
        for target in targets(panel) {
            if target["datasource"]["type"] != "loki" {
                continue;
            }
            let expr = target["expr"].as_str().expect("a LogQL expr");
            let labels = read_logql(&substitute(expr)).unwrap_or_else(|e| panic!("{expr}: {e}"));
            // Stream labels opscope's loki exporter writes, then structured metadata.
            assert_eq!(
                labels,
                [
                    "operator_name",
                    "k8s_namespace",
                    "reconcile_id",
                    "k8s_object"
                ]
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 1);
    assert!(read_logql(r#"{a="b" | c="d""#).is_err());
    assert!(read_logql(r#"{a="b"} c="d""#).is_err());
}

/// The dashboard's variables and Grafana's interval macros replaced by values
/// Prometheus accepts.
fn substitute(query: &str) -> String {
    [
        ("$__rate_interval", "1m"),
        ("$__interval", "15s"),
        ("$__range", "5m"),
        ("$operator_name", ".*"),
        ("$k8s_namespace", ".*"),
        ("$reconcile_id", ".*"),
        ("$k8s_object", ".*"),
    ]
    .iter()
    .fold(query.to_string(), |q, (from, to)| q.replace(from, to))
}

/// Every PromQL query: the panels' and the selectors of the variables'
/// `label_values(selector, label)`, with the panel's id (0 for variables).
fn promql_queries(dashboard: &Value) -> Vec<(u64, String)> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        if panel["datasource"]["type"] != "prometheus" {
            continue;
        }
        for expr in exprs(panel) {
            queries.push((panel["id"].as_u64().unwrap_or_default(), substitute(&expr)));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            let selector = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(selector, _)| selector)
                .expect("label_values(selector, label)");
            queries.push((0, substitute(selector)));
        }
    }
    queries
}

/// Panels that must show data from the demo: reconciles, writes, signals (the API
/// latency panel reads the operators' own series, which the demo has not).
const PANELS_WITH_DEMO_DATA: &[u64] = &[0, 1, 2, 3, 4, 5, 7, 8];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_promql_query_runs_on_prometheus_fed_by_the_demo() {
    let Some(binary) = prometheus_or_skip() else {
        return;
    };
    let table = every_query_on(&binary).await;
    print_table("prometheus 2", &table);
}

/// The same on Prometheus 3 (built from its module), and every expression of
/// `deploy/prometheus/rules.yaml` as Prometheus 3 loaded it, each evaluated: a table
/// of panel (or rule), expression and series count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_promql_query_and_rule_runs_on_prometheus_3_fed_by_the_demo() {
    let Some(binary) = prometheus3_or_skip() else {
        return;
    };
    let table = every_query_on(&binary).await;
    print_table("prometheus 3", &table);
}

/// (panel or rule, expression, series returned)
type QueryTable = Vec<(String, String, usize)>;

fn print_table(server: &str, table: &QueryTable) {
    println!("{server}: | panel | expression | series |");
    for (panel, query, series) in table {
        println!("{server}: | {panel} | `{query}` | {series} |");
    }
}

/// Runs the demo into a Prometheus that scrapes it and evaluates the rules, then
/// every dashboard query (those of panels that should show data until they do) and
/// every rule's expression.
async fn every_query_on(binary: &Path) -> QueryTable {
    let arguments = ["--duration", "50", "--prometheus", "127.0.0.1:0"].map(String::from);
    let demo = tokio::task::block_in_place(|| Opscope::start_demo(&arguments));
    let scrape = demo.address("exporters.prometheus");
    let rules = vec![repo("deploy/prometheus/rules.yaml")];
    let prometheus = PrometheusServer::start_with_rules(binary, &scrape, &rules).await;

    // The three misbehaviours of the demo are firing.
    prometheus
        .eventually("count(opscope_signal_active) >= 3", |a| !a.is_empty())
        .await;

    let dashboard = dashboard();
    let queries = promql_queries(&dashboard);
    assert!(queries.len() >= 10, "{queries:#?}");
    let http = http_client();
    let mut table = QueryTable::new();
    for (panel, query) in &queries {
        let url = url::Url::parse_with_params(&prometheus.url("/api/v1/query"), [("query", query)])
            .expect("a query URL");
        let response = http.get(url).send().await.expect("Prometheus answers");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert_eq!(status, 200, "panel {panel}: {query}\n{body}");
        let series = if PANELS_WITH_DEMO_DATA.contains(panel) {
            prometheus.eventually(query, |a| !a.is_empty()).await.len()
        } else {
            prometheus.query(query).await.len()
        };
        table.push((format!("panel {panel}"), query.clone(), series));
    }
    let table_query = format!(
        "{} and on (signal, name) opscope_signal_active{{signal=\"reconcile_loop\",name=\"train\"}}",
        queries
            .iter()
            .find(|(panel, _)| *panel == 7)
            .map(|(_, q)| q.clone())
            .expect("the signal table")
    );
    let loop_row = prometheus.eventually(&table_query, |a| a.len() == 1).await;
    assert_eq!(
        loop_row[0].0.get("operator_name").map(String::as_str),
        Some("kuberay-operator")
    );
    for (rule, expression) in loaded_rules(&prometheus).await {
        let body = prometheus_query_status(&http, &prometheus, &expression).await;
        assert_eq!(body.0, 200, "rule {rule}: {expression}\n{}", body.1);
        let series = prometheus.query(&expression).await.len();
        table.push((
            format!("rule {rule}"),
            expression.replace('\n', " "),
            series,
        ));
    }
    table
}

/// Every rule Prometheus loaded: (record or alert name, expression), each healthy.
async fn loaded_rules(prometheus: &PrometheusServer) -> Vec<(String, String)> {
    let answer = opscope_testkit::backend::poll_until(
        || async {
            let response = http_client()
                .get(prometheus.url("/api/v1/rules"))
                .send()
                .await;
            let body = match response {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            serde_json::from_str::<Value>(&body).unwrap_or_default()
        },
        |answer| {
            answer["data"]["groups"]
                .as_array()
                .is_some_and(|g| !g.is_empty())
        },
    )
    .await
    .unwrap_or_else(|last| panic!("no rules loaded: {last}"));
    let mut rules = Vec::new();
    for group in answer["data"]["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = rule["name"].as_str().unwrap_or_default().to_string();
            assert_ne!(rule["health"], "err", "rule {name}: {}", rule["lastError"]);
            rules.push((name, rule["query"].as_str().unwrap_or_default().to_string()));
        }
    }
    assert!(rules.len() >= 10, "{rules:#?}");
    rules
}

async fn prometheus_query_status(
    http: &reqwest::Client,
    prometheus: &PrometheusServer,
    query: &str,
) -> (u16, String) {
    let url = url::Url::parse_with_params(&prometheus.url("/api/v1/query"), [("query", query)])
        .expect("a query URL");
    let response = http.get(url).send().await.expect("Prometheus answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}
