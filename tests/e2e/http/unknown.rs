//! `/api/runs` follows `fleet runs`: an unknown project or namespace (not in the config in
//! force, no runs) is a 404 with a one-line JSON error, not an empty list.

use crate::common::http_client::{get, http_address};
use crate::common::*;

#[test]
fn an_unknown_project_or_namespace_is_404_like_the_command() {
    let f = Fleet::new(&format!(
        "http_listen = \"127.0.0.1:0\"\n[projects.p]\ncommand = {}\n",
        sh("true")
    ));
    let d = f.start_daemon();
    let addr = http_address(&d);
    let cli = f.cmd(&["runs", "--project", "nosuch"]);
    assert_eq!(cli.code(), Some(2));
    for (query, what) in [
        ("project=nosuch", "project"),
        ("namespace=nosuch", "namespace"),
    ] {
        let a = get(&addr, &format!("/api/runs?{query}"));
        assert_eq!(a.status, 404, "{query}: {}", a.text());
        let why = a.json()["error"].as_str().unwrap().to_string();
        assert!(why.contains(&format!("unknown {what} \"nosuch\"")), "{why}");
    }
    for known in ["project=p", "namespace=default"] {
        let a = get(&addr, &format!("/api/runs?{known}"));
        assert_eq!(a.status, 200, "{known}: {}", a.text());
        assert_eq!(a.json(), serde_json::json!([]));
    }
}
