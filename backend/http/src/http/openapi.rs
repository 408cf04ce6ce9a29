//! The API's OpenAPI 3.1 document (`GET /api/v1/openapi.json`) and the page that renders it
//! (`GET /api-docs`).
//!
//! The document is derived by utoipa from the types the handlers serialise (the wire types of
//! `lockscope_model::wire`, the pages of [`super::query`]) and from the `#[utoipa::path]`
//! attribute on each handler, which names its parameters and every answer it gives; only the
//! small JSON envelopes the handlers build with `json!` (errors, `{"sources": …}`) and the event
//! stream's data are described apart, in [`super::bodies`]. A unit test checks that every route the
//! router has is in the document, and the contract test (`tests/tests/openapi_contract.rs`)
//! runs schemathesis against a live lockscope to check that every answer matches it.
//!
//! The page is HTML rendered here from the same document, once, with nothing fetched from
//! elsewhere: it works in a build without the web UI and behind any proxy.
//!
//! This module owns the description only: it never changes what a handler answers.

use std::fmt::Write as _;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use lockscope_model::wire::{
    StreamEvent, ViewLock, ViewRemoved, ViewSnapshot, ViewSource, ViewTotals,
};

/// The security schemes: read tokens (in the header, or in the query for `EventSource`) and
/// admin tokens.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        // Every read that takes a read token takes a basic-auth user of `[http] read_auth` too.
        for item in openapi.paths.paths.values_mut() {
            if let Some(security) = item.get.as_mut().and_then(|op| op.security.as_mut()) {
                let reads = serde_json::to_value(&*security)
                    .is_ok_and(|v| v.to_string().contains("\"read_token\""));
                if reads {
                    security.push(utoipa::openapi::security::SecurityRequirement::new(
                        "basic_auth",
                        Vec::<String>::new(),
                    ));
                }
            }
        }
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "read_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A bearer token of `[http] read_auth` (stored as a bcrypt hash), a read \
                         token (`[admin] read_tokens`) or an admin token. Needed for `/api/v1/…` \
                         reads only when read credentials are configured.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "access_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "access_token",
                "A read token (percent-encoded) in the query, for clients that cannot set headers \
                 (EventSource). Admin tokens are refused here.",
            ))),
        );
        components.add_security_scheme(
            "basic_auth",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "A user of `[http] read_auth` `basic_auth_users` (stored as a bcrypt \
                         hash): reads, as `read_token`.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An admin token (`[admin] tokens`): force release."))
                    .build(),
            ),
        );
    }
}

/// The event stream's `event:` names and the schema of each one's data, as the extension
/// `x-sse-events` of `GET /api/v1/events` (`{"all": {name: schema}, "view": {name: schema}}`:
/// the stream of every lock, and a live view's), and its 200 answer's schema as the `oneOf`.
struct EventTypes;

impl Modify for EventTypes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::extensions::ExtensionsBuilder;
        let all = ["snapshot", "lock", "removed", "source"]
            .map(|name| (name, "StreamEvent"))
            .to_vec();
        let view = [
            ("snapshot", "ViewSnapshotData"),
            ("lock", "ViewLockData"),
            ("removed", "ViewRemovedData"),
            ("source", "ViewSourceData"),
            ("view", "ViewTotalsData"),
        ];
        let schemas = |names: &[(&str, &str)]| -> Value {
            names
                .iter()
                .map(|(event, schema)| {
                    (
                        event.to_string(),
                        serde_json::json!({ "$ref": format!("#/components/schemas/{schema}") }),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let extension = serde_json::json!({ "all": schemas(&all), "view": schemas(&view) });
        if let Some(get) = openapi
            .paths
            .paths
            .get_mut("/api/v1/events")
            .and_then(|item| item.get.as_mut())
        {
            let extensions = ExtensionsBuilder::new()
                .add("x-sse-events", extension)
                .build();
            get.extensions
                .get_or_insert_with(Default::default)
                .merge(extensions);
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lockscope",
        description = "Read API, event stream, force release, metrics and probes of lockscope, \
                       the observability and admin dashboard for distributed locks. Times are \
                       epoch milliseconds (`*_ms` instants) or millisecond durations. Errors are \
                       JSON `{\"error\": …}`; a bad query parameter also names it \
                       (`\"parameter\"`)."
    ),
    paths(
        super::info,
        super::list_locks,
        super::history::lock_detail,
        super::history::lock_events,
        super::history::store_status,
        super::admin::release,
        super::admin::audit,
        super::sessions,
        super::waitfor,
        super::deadlocks,
        super::blockers,
        super::sources,
        super::events,
        document,
        super::metrics,
        healthz,
        super::readyz,
    ),
    components(schemas(
        StreamEvent,
        ViewSnapshot,
        ViewTotals,
        ViewLock,
        ViewRemoved,
        ViewSource,
    )),
    modifiers(&Security, &EventTypes),
    tags(
        (name = "locks", description = "Locks, their holders, waiters and history"),
        (name = "sessions", description = "Sessions, connections and leases; the wait-for graph"),
        (name = "stream", description = "Server-Sent Events"),
        (name = "admin", description = "Force release and its audit log"),
        (name = "operations", description = "Metrics, probes and this description"),
    )
)]
pub struct ApiDoc;

/// The document, built once, as JSON. The descriptions are the Rust doc comments: their
/// intra-doc links (`[`Type`]`, `[`name`](mod@name)`) mean nothing to a reader of the API, so
/// only their code spans are kept.
pub fn openapi() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        doc.info.version = env!("CARGO_PKG_VERSION").to_string();
        match serde_json::to_value(&doc) {
            Ok(mut value) => {
                plain_descriptions(&mut value);
                value
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot serialise the OpenAPI document");
                Value::Object(Default::default())
            }
        }
    })
}

/// The document as JSON text, built once.
fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| serde_json::to_string_pretty(openapi()).unwrap_or_default())
}

/// Every `description` and `summary` in `value` without rustdoc's link syntax.
fn plain_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "description" || key == "summary" => {
                        *text = without_doc_links(text);
                    }
                    v => plain_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(plain_descriptions),
        _ => {}
    }
}

/// `[`x`]` and `[`x`](target)` as `` `x` ``.
fn without_doc_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("[`") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let Some(end) = after.find("`]") else {
            out.push_str(&rest[at..]);
            return out;
        };
        out.push_str(&after[..end + 1]);
        rest = &after[end + 2..];
        if rest.starts_with('(') {
            if let Some(close) = rest.find(')') {
                rest = &rest[close + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the document is served; open even when reads need a token.
pub const DOCUMENT_PATH: &str = "/api/v1/openapi.json";
/// Where the document's page is served.
pub const PAGE_PATH: &str = "/api-docs";

/// `GET /api/v1/openapi.json`: this description (open, even when reads need a token).
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "operations",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object),
    )
)]
pub async fn document() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
        .into_response()
}

/// `GET /healthz`: the process is up (answered by a closure in the router).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "The process is up", content_type = "text/plain", body = String, example = "ok\n"))
)]
#[allow(dead_code)]
async fn healthz() {}

/// `GET /api-docs`: the document as a page.
pub async fn page() -> Response {
    static PAGE: OnceLock<String> = OnceLock::new();
    let html = PAGE.get_or_init(|| render_page(openapi()));
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html.as_str(),
    )
        .into_response()
}

/// HTML-escaped text.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escaped prose with its `code` spans as `<code>`.
fn prose(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", esc(part));
        } else {
            out.push_str(&esc(part));
        }
    }
    out
}

/// A schema in one line: a link to a component, a type with its constraints, or its shape.
fn schema_text(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("<a href=\"#schema-{0}\">{0}</a>", esc(name));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(items) = schema.get(key).and_then(Value::as_array) {
            let parts: Vec<String> = items.iter().map(schema_text).collect();
            let sep = if key == "allOf" { " &amp; " } else { " | " };
            return parts.join(sep);
        }
    }
    let mut text = match schema.get("type") {
        Some(Value::String(t)) => esc(t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(esc)
            .collect::<Vec<_>>()
            .join(" | "),
        _ if schema.get("properties").is_some() => "object".into(),
        _ => "any".into(),
    };
    if let Some(items) = schema.get("items") {
        text = format!("array of {}", schema_text(items));
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        text = format!("map of {}", schema_text(values));
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("<code>{}</code>", esc(&v.to_string())))
            .collect();
        text = format!("one of {}", names.join(", "));
    }
    let mut limits = Vec::new();
    for (key, label) in [
        ("minimum", "min"),
        ("maximum", "max"),
        ("maxLength", "max length"),
        ("default", "default"),
        ("format", "format"),
    ] {
        if let Some(v) = schema.get(key) {
            limits.push(format!("{label} {}", esc(&v.to_string())));
        }
    }
    if !limits.is_empty() {
        text = format!("{text} ({})", limits.join(", "));
    }
    text
}

/// The page: each operation with its parameters, security and answers, then every schema.
fn render_page(doc: &Value) -> String {
    let mut out = String::new();
    let title = doc["info"]["title"].as_str().unwrap_or("lockscope");
    let version = doc["info"]["version"].as_str().unwrap_or("");
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" type=\"image/svg+xml\" href=\"assets/favicon.svg\">\
         <title>{} API {}</title><style>{STYLE}</style></head><body>\
         <header><h1>{} API <small>{}</small></h1>\
         <p>{}</p><p>The document itself: <a href=\"api/v1/openapi.json\">/api/v1/openapi.json</a> \
         (OpenAPI {}). <a href=\"./\">Dashboard</a></p></header><nav><ul>",
        esc(title),
        esc(version),
        esc(title),
        esc(version),
        prose(doc["info"]["description"].as_str().unwrap_or("")),
        esc(doc["openapi"].as_str().unwrap_or("")),
    );
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    let operations: Vec<(String, String, Value)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .into_iter()
                .flatten()
                .filter(|(method, _)| {
                    ["get", "post", "put", "delete", "patch"].contains(&method.as_str())
                })
                .map(|(method, op)| (path.clone(), method.clone(), op.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let anchor = |method: &str, path: &str| {
        format!("op-{method}-{path}")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
    };
    for (path, method, op) in &operations {
        let _ = write!(
            out,
            "<li><a href=\"#{}\"><span class=\"m {m}\">{m}</span> {}</a></li>",
            anchor(method, path),
            esc(path),
            m = esc(&method.to_uppercase()),
        );
        let _ = op;
    }
    out.push_str("<li><a href=\"#schemas\">Schemas</a></li></ul></nav><main>");
    for (path, method, op) in &operations {
        let _ = write!(
            out,
            "<section class=\"op\" id=\"{}\"><h2><span class=\"m {m}\">{m}</span> <code>{}</code></h2>",
            anchor(method, path),
            esc(path),
            m = esc(&method.to_uppercase()),
        );
        if let Some(summary) = op["summary"].as_str() {
            let _ = write!(out, "<p class=\"summary\">{}</p>", prose(summary));
        }
        if let Some(description) = op["description"].as_str() {
            let _ = write!(out, "<p>{}</p>", prose(description));
        }
        if let Some(security) = op["security"].as_array() {
            let names: Vec<String> = security
                .iter()
                .map(|req| {
                    let keys: Vec<&str> = req
                        .as_object()
                        .map(|o| o.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    if keys.is_empty() {
                        "none (when not configured)".to_string()
                    } else {
                        keys.join(" + ")
                    }
                })
                .collect();
            let _ = write!(
                out,
                "<p><b>Credentials:</b> {}</p>",
                esc(&names.join(" or "))
            );
        }
        if let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
            out.push_str(
                "<h3>Parameters</h3><table><tr><th>name</th><th>in</th><th>schema</th>\
                 <th>description</th></tr>",
            );
            for p in params {
                let _ = write!(
                    out,
                    "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(p["name"].as_str().unwrap_or("")),
                    if p["required"].as_bool() == Some(true) {
                        " <b>required</b>"
                    } else {
                        ""
                    },
                    esc(p["in"].as_str().unwrap_or("")),
                    schema_text(&p["schema"]),
                    prose(p["description"].as_str().unwrap_or("")),
                );
            }
            out.push_str("</table>");
        }
        if let Some(body) = op["requestBody"]["content"].as_object() {
            out.push_str("<h3>Body</h3><ul>");
            for (media, content) in body {
                let _ = write!(
                    out,
                    "<li><code>{}</code>: {}</li>",
                    esc(media),
                    schema_text(&content["schema"])
                );
            }
            out.push_str("</ul>");
        }
        out.push_str(
            "<h3>Answers</h3><table><tr><th>status</th><th>description</th><th>body</th></tr>",
        );
        for (status, response) in op["responses"].as_object().into_iter().flatten() {
            let bodies: Vec<String> = response["content"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(media, c)| {
                    format!("<code>{}</code>: {}", esc(media), schema_text(&c["schema"]))
                })
                .collect();
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(status),
                prose(response["description"].as_str().unwrap_or("")),
                bodies.join("<br>"),
            );
        }
        out.push_str("</table>");
        if let Some(events) = op["x-sse-events"].as_object() {
            out.push_str("<h3>Events</h3><table><tr><th>stream</th><th><code>event:</code></th><th>data</th></tr>");
            for (stream, names) in events {
                for (name, schema) in names.as_object().into_iter().flatten() {
                    let _ = write!(
                        out,
                        "<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
                        if stream == "view" {
                            "live view (with a lock query)"
                        } else {
                            "every lock"
                        },
                        esc(name),
                        schema_text(schema),
                    );
                }
            }
            out.push_str("</table>");
        }
        out.push_str("</section>");
    }
    out.push_str("<h2 id=\"schemas\">Schemas</h2>");
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(
            out,
            "<section class=\"schema\" id=\"schema-{0}\"><h3>{0}</h3>",
            esc(name)
        );
        if let Some(description) = schema["description"].as_str() {
            let _ = write!(out, "<p>{}</p>", prose(description));
        }
        render_schema_body(schema, &mut out);
        out.push_str("</section>");
    }
    out.push_str("</main></body></html>");
    out
}

/// A schema's fields (or variants) as a table.
fn render_schema_body(schema: &Value, out: &mut String) {
    if let Some(props) = schema["properties"].as_object() {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push_str("<table><tr><th>field</th><th>schema</th><th>description</th></tr>");
        for (field, s) in props {
            let _ = write!(
                out,
                "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td></tr>",
                esc(field),
                if required.contains(&field.as_str()) {
                    ""
                } else {
                    " <i>optional</i>"
                },
                schema_text(s),
                prose(s["description"].as_str().unwrap_or("")),
            );
        }
        out.push_str("</table>");
    } else if let Some(variants) = schema["oneOf"].as_array().or(schema["allOf"].as_array()) {
        for variant in variants {
            if let Some(description) = variant["description"].as_str() {
                let _ = write!(out, "<p>{}</p>", prose(description));
            }
            if variant.get("properties").is_some() {
                render_schema_body(variant, out);
            } else {
                let _ = write!(out, "<p>{}</p>", schema_text(variant));
            }
        }
    } else {
        let _ = write!(out, "<p>{}</p>", schema_text(schema));
    }
}

const STYLE: &str =
    "body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2430;background:#f7f8fa}\
body{display:grid;grid-template-columns:19em minmax(0,1fr)}\
header{grid-column:1/-1;padding:1em 2em;background:#1d2430;color:#fff}header a{color:#9cc4ff}\
h1 small{font-weight:normal;opacity:.7}nav{padding:1em;position:sticky;top:0;align-self:start;\
max-height:100vh;overflow:auto;box-sizing:border-box}nav ul{list-style:none;padding:0;margin:0}\
nav li{margin:.2em 0;font-size:13px}main{padding:1em 2em 1em 0}\
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:.5em 1em;margin:0 0 1em}\
table{border-collapse:collapse;width:100%;margin:.5em 0}td,th{border-top:1px solid #e8ebef;\
padding:.3em .5em;text-align:left;vertical-align:top}th{font-weight:600;font-size:13px;color:#555}\
code{font:13px ui-monospace,monospace}.m{display:inline-block;min-width:3.5em;font:600 12px \
ui-monospace,monospace;padding:.1em .4em;border-radius:3px;color:#fff;background:#2f6fde}\
.m.POST{background:#c2410c}";

#[cfg(test)]
mod tests {
    use super::*;

    /// The one definition of a live view's events (`lockscope_model::wire::ViewEvent`) through
    /// all three of its readers: what the server writes, what the document says that event
    /// carries (every key a property of its schema, every required property present), and
    /// what the frontend reads back (`ViewEvent::parse`).
    #[test]
    fn every_view_event_round_trips_through_server_document_and_frontend() {
        use lockscope_model::wire::ViewEvent;
        let doc = openapi();
        let view = &doc["paths"]["/api/v1/events"]["get"]["x-sse-events"]["view"];
        let documented: std::collections::BTreeSet<&str> = view
            .as_object()
            .expect("x-sse-events.view")
            .keys()
            .map(String::as_str)
            .collect();
        let defined: std::collections::BTreeSet<&str> = ViewEvent::NAMES.into_iter().collect();
        assert_eq!(documented, defined);
        let events = ViewEvent::examples();
        let sent: std::collections::BTreeSet<&str> = events.iter().map(|e| e.name()).collect();
        assert_eq!(sent, defined, "a sample of every event");
        for event in events {
            let data = event.data().expect("serialised");
            let value: Value = serde_json::from_str(&data).expect("json");
            let reference = view[event.name()]["$ref"].as_str().expect("$ref");
            let name = reference.rsplit('/').next().expect("schema name");
            let schema = &doc["components"]["schemas"][name];
            let properties = schema["properties"].as_object().expect("properties");
            for key in value.as_object().expect("object").keys() {
                assert!(properties.contains_key(key), "{name} lacks {key}");
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                let required = required.as_str().expect("name");
                assert!(value.get(required).is_some(), "{name}: {required} missing");
            }
            assert_eq!(ViewEvent::parse(event.name(), &data), Ok(event));
        }
    }

    /// The literal paths the router is built with (every `.route("…"` in the router's source),
    /// so a new route without a description fails here.
    fn router_routes() -> Vec<(String, String)> {
        let mut routes = Vec::new();
        for source in [include_str!("mod.rs"), include_str!("ui.rs")] {
            let mut rest = source;
            while let Some(at) = rest.find(".route(\"") {
                rest = &rest[at + 8..];
                let Some(end) = rest.find('"') else { break };
                let path = rest[..end].to_string();
                let after = &rest[end..];
                let method = if after
                    .split(')')
                    .next()
                    .unwrap_or_default()
                    .contains("post(")
                    || after
                        .trim_start_matches(['"', ',', ' ', '\n'])
                        .starts_with("post(")
                {
                    "post"
                } else {
                    "get"
                };
                routes.push((path, method.to_string()));
                rest = after;
            }
        }
        routes
    }

    /// The web UI's pages and files: HTML for browsers, not API.
    const NOT_API: &[&str] = &["/", "/locks/{id}", "/sessions", "/waitfor", "/api-docs"];

    #[test]
    fn the_document_is_openapi_3_1_and_lists_every_route() {
        let doc: Value = serde_json::from_str(document_json()).expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
        let paths = doc["paths"].as_object().expect("paths");
        let routes = router_routes();
        assert!(routes.len() >= 14, "router source not read: {routes:?}");
        for (path, method) in &routes {
            if NOT_API.contains(&path.as_str()) || path.starts_with("/assets") {
                continue;
            }
            assert!(
                paths.get(path).and_then(|item| item.get(method)).is_some(),
                "{} {path} is routed but not in the OpenAPI document",
                method.to_uppercase()
            );
        }
        // Every operation answers something and every reference resolves.
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let text = document_json();
        let mut rest = text;
        while let Some(at) = rest.find("\"#/components/schemas/") {
            rest = &rest[at + 22..];
            let name = &rest[..rest.find('"').expect("end of ref")];
            assert!(schemas.contains_key(name), "dangling reference to {name}");
        }
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("path item") {
                let responses = op["responses"].as_object().expect("responses");
                assert!(!responses.is_empty(), "{method} {path} has no answers");
                if path.starts_with("/api/") && path != DOCUMENT_PATH {
                    assert!(
                        responses.contains_key("401") && responses.contains_key("403"),
                        "{method} {path}: the refusals are not described"
                    );
                }
            }
        }
        let events = &paths["/api/v1/events"]["get"]["x-sse-events"];
        for name in ["snapshot", "lock", "removed", "source"] {
            assert!(events["all"][name].is_object() && events["view"][name].is_object());
        }
        assert!(events["view"]["view"].is_object());
    }

    #[test]
    fn documented_enums_are_what_the_query_readers_take() {
        use crate::http::paging::pairs;
        let doc: Value = serde_json::from_str(document_json()).expect("JSON");
        let params = |path: &str| doc["paths"][path]["get"]["parameters"].clone();
        let values = |p: &Value| -> Vec<String> {
            let schema = if let Some(r) = p["schema"]["$ref"].as_str() {
                doc["components"]["schemas"][r.rsplit('/').next().expect("name")].clone()
            } else {
                p["schema"].clone()
            };
            schema["enum"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        type Check = fn(&str) -> bool;
        let readers: [(&str, Check); 4] = [
            ("/api/v1/locks", |q| {
                super::super::query::LockQuery::parse(&pairs(q), 0).is_ok()
            }),
            ("/api/v1/sessions", |q| {
                super::super::sessions::SessionQuery::parse(&pairs(q), 0).is_ok()
            }),
            ("/api/v1/waitfor", |q| {
                super::super::waitfor::WaitForQuery::parse(&pairs(q), 0).is_ok()
            }),
            ("/api/v1/blockers", |q| {
                super::super::waitfor::BlockersQuery::parse(&pairs(q)).is_ok()
            }),
        ];
        for (path, accepts) in readers {
            let params = params(path);
            let params = params.as_array().expect("parameters");
            for p in params {
                let name = p["name"].as_str().expect("name");
                for value in values(p) {
                    assert!(
                        accepts(&format!("{name}={value}")),
                        "{path}: {name}={value}"
                    );
                }
                assert!(!accepts(&format!("{name}=%00nonsense")) || values(p).is_empty());
            }
            assert!(!accepts("no_such_parameter=1"), "{path}");
        }
    }

    #[test]
    fn documented_limits_are_the_readers_limits() {
        use crate::http::paging::{LIMIT_DEFAULT, LIMIT_MAX};
        let doc: Value = serde_json::from_str(document_json()).expect("JSON");
        let limit = |path: &str| {
            doc["paths"][path]["get"]["parameters"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == "limit"))
                .map(|p| p["schema"].clone())
                .expect("limit")
        };
        for path in [
            "/api/v1/locks",
            "/api/v1/sessions",
            "/api/v1/waitfor",
            "/api/v1/blockers",
            "/api/v1/events",
        ] {
            let schema = limit(path);
            assert_eq!(schema["maximum"], LIMIT_MAX as u64, "{path}");
            assert_eq!(schema["minimum"], 1, "{path}");
            assert_eq!(schema["default"], LIMIT_DEFAULT as u64, "{path}");
        }
        let audit = limit("/api/v1/audit");
        assert_eq!(audit["maximum"], crate::http::admin::MAX_AUDIT_PAGE);
    }

    #[test]
    fn documented_release_body_limits_are_the_parsers() {
        use lockscope_model::release::{MAX_HOLDER_BYTES, MAX_REASON_CHARS, MAX_SMALL_FIELD_BYTES};
        let doc: Value = serde_json::from_str(document_json()).expect("JSON");
        let fields = &doc["components"]["schemas"]["ReleaseRequest"]["properties"];
        assert_eq!(fields["holder"]["maxLength"], MAX_HOLDER_BYTES);
        assert_eq!(fields["reason"]["maxLength"], MAX_REASON_CHARS);
        for field in ["session", "version"] {
            assert_eq!(fields[field]["maxLength"], MAX_SMALL_FIELD_BYTES, "{field}");
        }
    }

    #[test]
    fn the_page_shows_every_operation_and_escapes() {
        let html = render_page(openapi());
        for path in [
            "/api/v1/locks",
            "/api/v1/locks/{id}/release",
            "/api/v1/events",
        ] {
            assert!(html.contains(&format!("<code>{path}</code>")), "{path}");
        }
        assert!(html.contains("id=\"schema-LockView\""));
        assert!(html.contains("x-ndjson"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("[<code>"), "rustdoc links left in the page");
        assert_eq!(
            without_doc_links("see [`query`] and [`sessions`](mod@sessions), [x]"),
            "see `query` and `sessions`, [x]"
        );
        assert_eq!(prose("a `<b>` c"), "a <code>&lt;b&gt;</code> c");
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
