//! The dashboard's stylesheet and script, embedded in the binary (no build step, no CDN).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("assets/dashboard.css");
const JS: &str = include_str!("assets/dashboard.js");

/// `GET /assets/{name}`: one of the two embedded files; 404 for any other name.
pub(super) async fn get(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "dashboard.css" => {
            ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
        }
        "dashboard.js" => (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            JS,
        )
            .into_response(),
        _ => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}
