//! Headless Chromium driven over the DevTools protocol: open a page, evaluate script in
//! it, take a screenshot. The browser is killed when dropped; every wait is bounded.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium on the PATH.
pub fn chromium() -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|n| path.split(':').map(move |d| Path::new(d).join(n)))
        .find(|p| p.is_file())
}

/// A headless browser.
pub struct Browser {
    child: Child,
    port: u16,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium with its profile in `dir`.
    pub fn start(dir: &Path) -> Self {
        let bin = chromium()
            .expect("chromium is not installed: ./scripts/install-test-deps.sh installs it");
        let mut child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1200,2400",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.join("chromium").display()
            ))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                    let port = rest.split('/').next().unwrap_or("").parse::<u16>();
                    let _ = tx.send(port.ok());
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(60))
            .ok()
            .flatten()
            .expect("chromium never said where its DevTools listen");
        Self { child, port }
    }

    /// A new tab on `url`.
    pub fn open(&self, url: &str) -> Page {
        let (code, body) = http(self.port, "PUT", &format!("/json/new?{url}"));
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let ws = v["webSocketDebuggerUrl"].as_str().unwrap().to_string();
        let stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (socket, _) = tungstenite::client(ws.as_str(), stream).unwrap();
        Page { socket, id: 0 }
    }
}

/// One HTTP/1.1 request to the browser's DevTools endpoint.
fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // DevTools keeps the connection open: read the head, then Content-Length bytes.
    let mut r = BufReader::new(s);
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    let code = head[9..12].parse().unwrap();
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// A tab.
pub struct Page {
    socket: tungstenite::WebSocket<TcpStream>,
    id: u64,
}

impl Page {
    /// Calls `method`; its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(tungstenite::Message::text(msg)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "{method}: no answer");
            let m = self.socket.read().unwrap();
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            if v["id"] == id {
                assert!(v["error"].is_null(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of `expr` in the page (promises awaited).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r["exceptionDetails"].is_null(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Waits (at most `limit`) until `expr` is true in the page (an exception, e.g. while
    /// the page loads, is not).
    pub fn wait(&mut self, expr: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        let guarded = format!(
            "(function () {{ try {{ return ({expr}); }} catch (e) {{ return false; }} }})()"
        );
        while self.eval(&guarded) != Value::Bool(true) {
            assert!(Instant::now() < deadline, "never true in the page: {expr}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the page as it is drawn.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap()
    }
}
