//! No false refusal for programs that connect from worker threads: every `connect` passes
//! the sandbox's gate, which must judge a call from any thread of a program like one from its
//! main thread. Real programs against servers the test starts on loopback: a Python thread
//! pool (raw sockets and `urllib`), Python threads with `http.client`, `curl --parallel`,
//! Node's worker threads, and `npm ci` against a local registry. Run with and without the
//! namespaces layer.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::json;
use sha2::Digest;
use talaria_harness::MockReply;

use crate::support::*;

/// A listener on loopback and its port.
fn listen() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    (listener, port)
}

/// Serves HTTP on `listener`, one thread per connection: `files` by path, `/ok` with `ok`;
/// until the test ends.
fn http_server(listener: TcpListener, files: Vec<(String, Vec<u8>)>) {
    let files = std::sync::Arc::new(files);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let files = files.clone();
            std::thread::spawn(move || serve_one(stream, &files));
        }
    });
}

fn serve_one(mut stream: std::net::TcpStream, files: &[(String, Vec<u8>)]) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request);
    let target = text.split_whitespace().nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or(target).to_string();
    let body = files
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, body)| body.clone())
        .or_else(|| (path == "/ok").then(|| b"ok".to_vec()));
    let answer = match body {
        Some(body) => {
            let mut head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            head.extend(body);
            head
        }
        None => {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        }
    };
    let _ = stream.write_all(&answer);
}

/// Runs `commands` (one terminal call each) in a yolo session; their results.
async fn run_commands(commands: &[String], files: &[(&str, String)]) -> Vec<String> {
    let calls: Vec<(String, serde_json::Value)> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("t{i}"), json!({"command": c, "timeout": 120})))
        .collect();
    let mut script: Vec<MockReply> = calls
        .iter()
        .map(|(id, args)| MockReply::tool_call(id, "terminal", args.clone()))
        .collect();
    script.push(MockReply::text(&["done"]));
    let mut env = TestEnv::new(script).await;
    env.write_config("mode = \"yolo\"\n");
    for (name, text) in files {
        std::fs::write(env.workspace.path().join(name), text).expect("file");
    }
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, Duration::from_secs(240), |method, params| {
            panic!("the agent asked the client for {method}: {params}")
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    tool_results(&env.mock, commands.len())
}

const PYTHON_POOL: &str = r#"
import concurrent.futures, socket, sys, threading, urllib.request, http.client
port = int(sys.argv[1])
main = threading.get_ident()
def raw(i):
    assert threading.get_ident() != main
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
    return s.recv(100).split(b" ")[1].decode()
def library(i):
    return str(urllib.request.urlopen("http://127.0.0.1:%d/ok" % port, timeout=5).status)
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    print("pool", sorted(set(pool.map(raw, range(16)))), sorted(set(pool.map(library, range(16)))))
answers = []
def client():
    c = http.client.HTTPConnection("localhost", port, timeout=5)
    c.request("GET", "/ok")
    answers.append(c.getresponse().status)
threads = [threading.Thread(target=client) for _ in range(6)]
[t.start() for t in threads]
[t.join() for t in threads]
print("threads", sorted(set(answers)), len(answers))
"#;

const NODE_WORKERS: &str = r#"
const { Worker, isMainThread, parentPort, workerData } = require("worker_threads");
const net = require("net");
if (isMainThread) {
  const port = Number(process.argv[2]);
  let done = 0, ok = 0;
  for (let i = 0; i < 4; i++) {
    const w = new Worker(__filename, { workerData: port });
    w.on("message", (m) => { if (m === "200") ok++; if (++done === 4) console.log("workers", ok, "of", done); });
    w.on("error", (e) => { console.log("worker error", e.message); if (++done === 4) console.log("workers", ok, "of", done); });
  }
} else {
  const s = net.connect(workerData, "127.0.0.1", () => s.write("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"));
  s.on("data", (d) => { parentPort.postMessage(d.toString().split(" ")[1]); s.destroy(); });
  s.on("error", (e) => { parentPort.postMessage("error " + e.code); });
}
"#;

#[tokio::test]
async fn programs_that_connect_from_worker_threads_connect() {
    if !sandbox_enforced() {
        return;
    }
    let (listener, port) = listen();
    http_server(listener, Vec::new());
    // Each transfer's body to /dev/null (`-o` applies to one address).
    let urls: Vec<String> = (0..6)
        .map(|i| format!("-o /dev/null http://127.0.0.1:{port}/ok?{i}"))
        .collect();
    let results = run_commands(
        &[
            format!("/usr/bin/python3 pool.py {port}"),
            format!(
                "curl --parallel --parallel-max 6 -s --no-progress-meter -w '%{{http_code}}\\n' {} | sort | uniq -c",
                urls.join(" ")
            ),
            format!("node workers.js {port}"),
        ],
        &[
            ("pool.py", PYTHON_POOL.to_string()),
            ("workers.js", NODE_WORKERS.to_string()),
        ],
    )
    .await;
    assert!(
        results[0].contains("pool ['200'] ['200']") && results[0].contains("threads [200] 6"),
        "a Python thread pool: {}",
        results[0]
    );
    assert!(
        results[1].contains("6 200"),
        "curl --parallel: {}",
        results[1]
    );
    assert!(
        results[2].contains("workers 4 of 4"),
        "Node workers: {}",
        results[2]
    );
    for result in &results {
        assert!(
            !result.to_lowercase().contains("permission denied"),
            "{result}"
        );
    }
}

/// A package of one file, as a registry serves it (`package/` inside a gzipped tar).
fn package_tarball(dir: &std::path::Path, name: &str) -> Vec<u8> {
    let package = dir.join("package");
    std::fs::create_dir_all(&package).expect("package");
    std::fs::write(
        package.join("package.json"),
        json!({"name": name, "version": "1.0.0", "main": "index.js"}).to_string(),
    )
    .expect("package.json");
    std::fs::write(
        package.join("index.js"),
        format!("module.exports = '{name} loaded';\n"),
    )
    .expect("index.js");
    let tarball = dir.join(format!("{name}.tgz"));
    let made = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .arg("package")
        .status()
        .expect("tar");
    assert!(made.success());
    let bytes = std::fs::read(&tarball).expect("tarball");
    let _ = std::fs::remove_dir_all(&package);
    bytes
}

#[tokio::test]
async fn npm_ci_installs_from_a_local_registry() {
    if !sandbox_enforced() {
        return;
    }
    let fixtures = tempfile::tempdir().expect("fixtures");
    let names = ["left-pad-local", "right-pad-local", "center-local"];
    let tarballs: Vec<Vec<u8>> = names
        .iter()
        .map(|name| package_tarball(fixtures.path(), name))
        .collect();
    // The registry listens first: what it serves names its address.
    let (listener, port) = listen();
    let registry = format!("http://127.0.0.1:{port}");
    let mut files = Vec::new();
    let mut lock_packages = serde_json::Map::new();
    let mut dependencies = serde_json::Map::new();
    lock_packages.insert(
        String::new(),
        json!({"name": "app", "version": "1.0.0", "dependencies": {}}),
    );
    for (name, tarball) in names.iter().zip(&tarballs) {
        use base64::Engine;
        let integrity = format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(tarball))
        );
        let url = format!("{registry}/{name}/-/{name}-1.0.0.tgz");
        files.push((format!("/{name}/-/{name}-1.0.0.tgz"), tarball.clone()));
        files.push((
            format!("/{name}"),
            json!({
                "name": name,
                "dist-tags": {"latest": "1.0.0"},
                "versions": {"1.0.0": {"name": name, "version": "1.0.0",
                    "dist": {"tarball": url, "integrity": integrity}}}
            })
            .to_string()
            .into_bytes(),
        ));
        dependencies.insert((*name).to_string(), json!("1.0.0"));
        lock_packages.insert(
            format!("node_modules/{name}"),
            json!({"version": "1.0.0", "resolved": url, "integrity": integrity}),
        );
    }
    lock_packages["".to_string().as_str()]["dependencies"] = json!(dependencies.clone());
    http_server(listener, files);
    let manifest = json!({"name": "app", "version": "1.0.0", "dependencies": dependencies});
    let lock = json!({"name": "app", "version": "1.0.0", "lockfileVersion": 3,
        "requires": true, "packages": lock_packages});
    let results = run_commands(
        &[format!(
            "npm ci --registry={registry}/ --cache=$PWD/.npm-cache --no-audit --no-fund \
             --no-update-notifier --prefer-online 2>&1 | tail -5; \
             node -e \"console.log(require('left-pad-local'), require('center-local'))\""
        )],
        &[
            ("package.json", manifest.to_string()),
            ("package-lock.json", lock.to_string()),
        ],
    )
    .await;
    assert!(
        results[0].contains("left-pad-local loaded center-local loaded"),
        "npm ci: {}",
        results[0]
    );
}
