//! A small driver for headless Chromium over the DevTools protocol: start the browser, open a
//! page, evaluate JavaScript in it, take screenshots. Just what the dashboard's tests
//! (`http::browser`, `hosts::relayed_log`) need.
//!
//! Chromium is started with `--remote-debugging-port=0`; it prints the WebSocket address of its
//! DevTools endpoint on stderr, and the driver talks to the page's endpoint with one request at a
//! time (events are read and dropped).

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

use crate::common::*;

/// Where Chromium is: `FLEET_CHROMIUM`, else `chromium` or `chromium-browser` on the PATH, or
/// `/usr/bin/chromium`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLEET_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// A headless Chromium and one page of it. Dropping it kills the browser.
pub struct Browser {
    child: Child,
    page: WebSocket<TcpStream>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromium` headless with a fresh profile and a window of `width`×`height`
    /// pixels, and attaches to its first page. It carries `marker` in its environment (see
    /// [`MARKER_VAR`]), so that the test's [`Fleet`] ends whatever it leaves.
    pub fn start(chromium: &Path, marker: &str, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium)
            .args([
                "--headless",
                // The tests may run as root, where Chromium's sandbox refuses to start.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env(MARKER_VAR, marker)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads stderr to its end (a full pipe would block the browser), handing on the line
        // that names the DevTools endpoint.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let browser_ws = rx
            .recv_timeout(DEADLINE)
            .expect("Chromium did not print its DevTools address");
        // ws://127.0.0.1:PORT/devtools/browser/ID → the page list at http://127.0.0.1:PORT/json.
        let host = browser_ws["ws://".len()..]
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let started = Instant::now();
        let page_ws = loop {
            let list = http_get_json(&host, "/json/list");
            if let Some(ws) = list.as_array().and_then(|a| {
                a.iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_string))
            }) {
                break ws;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "Chromium opened no page: {list}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let stream = TcpStream::connect(&host).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        let (page, _) = tungstenite::client(page_ws.as_str(), stream).expect("DevTools WebSocket");
        let mut b = Browser {
            child,
            page,
            next_id: 0,
            _profile: profile,
        };
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b
    }

    /// Sends one DevTools command and returns its result (panics on a protocol error).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.page
            .send(Message::text(msg))
            .expect("send to Chromium");
        loop {
            let msg = self.page.read().expect("read from Chromium");
            let Message::Text(text) = msg else { continue };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == id {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// Evaluates `expr` in the page and returns its value (promises awaited).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Opens `url` and waits until the page has loaded.
    pub fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait(
            &format!("{url} to load"),
            &format!(
                "document.readyState === 'complete' && location.href === {}",
                json!(url)
            ),
        );
    }

    /// Waits until `expr` is true in the page.
    pub fn wait(&mut self, what: &str, expr: &str) {
        let started = Instant::now();
        loop {
            if self.eval(&format!("!!({expr})")) == Value::Bool(true) {
                return;
            }
            if started.elapsed() > DEADLINE {
                let body = self.eval("document.body ? document.body.innerText : ''");
                panic!(
                    "timed out waiting for {what} ({expr}); the page says:\n{}",
                    body.as_str().unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Saves a PNG screenshot of the page at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = data_encoding::BASE64
            .decode(r["data"].as_str().unwrap().as_bytes())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on `host` (`IP:PORT`) as JSON: for the DevTools page list.
fn http_get_json(host: &str, path: &str) -> Value {
    let a = super::http_client::get(host, path);
    serde_json::from_slice(&a.body).unwrap_or(Value::Null)
}
