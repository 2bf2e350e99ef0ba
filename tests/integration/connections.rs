//! What a client may hold open without a token: a real server on loopback
//! with small limits (`connections:` in the config), raw sockets for the
//! clients. Real time, kept short: every limit here is under a second.
//!
//! On loopback every client shares 127.0.0.1, so the flood tests show the
//! hardest case: the attacker and the good client are one address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ax::config::ConnectionsConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::live::{Live, TOKEN};

const HEAD: Duration = Duration::from_millis(600);
const BODY: Duration = Duration::from_millis(600);
const IDLE: Duration = Duration::from_millis(800);

fn limits(max: usize, idle: Duration) -> impl FnOnce(&mut ax::config::Config) {
    move |c| {
        c.connections = ConnectionsConfig {
            max_connections: max,
            header_read_timeout: HEAD,
            body_timeout: BODY,
            idle_timeout: idle,
            ..ConnectionsConfig::default()
        }
    }
}

fn addr(live: &Live) -> SocketAddr {
    live.server.as_ref().expect("running").addr
}

/// Reads until the server closes (or `within` passes: a panic); returns
/// what it sent and how long after `since` it closed.
async fn until_closed(
    stream: &mut TcpStream,
    since: Instant,
    within: Duration,
) -> (String, Duration) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.saturating_sub(since.elapsed());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "still open after {within:?}; got {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), since.elapsed())
}

/// One request on a fresh connection; the whole answer (the server closes).
async fn once(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("send");
    until_closed(&mut s, Instant::now(), Duration::from_secs(5))
        .await
        .0
}

const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nhost: ax\r\nconnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_or_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    let live = Live::start(limits(16, IDLE)).await;
    // Opened and never written to.
    let mut silent = TcpStream::connect(addr(&live)).await.unwrap();
    let (got, after) = until_closed(&mut silent, Instant::now(), Duration::from_secs(5)).await;
    assert!(got.is_empty(), "{got}");
    assert!(
        after >= IDLE - Duration::from_millis(50),
        "closed after {after:?}"
    );

    // One request on a keep-alive connection, then silence.
    let mut kept = TcpStream::connect(addr(&live)).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: ax\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let answered = Instant::now();
    let (rest, after) = until_closed(&mut kept, answered, Duration::from_secs(5)).await;
    assert!(rest.is_empty(), "{rest}");
    assert!(
        after >= IDLE - Duration::from_millis(50),
        "closed after {after:?}"
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_head_is_closed_at_the_header_timeout() {
    // Idle is long: only the head deadline can end this.
    let live = Live::start(limits(16, Duration::from_secs(30))).await;
    let mut s = TcpStream::connect(addr(&live)).await.unwrap();
    let started = Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    // A header byte every 100 ms, for far longer than the head deadline.
    let (mut reader, mut writer) = s.into_split();
    let dribble = tokio::spawn(async move {
        for _ in 0..100 {
            if writer.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the slow head is cut");
    assert!(
        closed >= HEAD - Duration::from_millis(50) && closed < HEAD + Duration::from_secs(1),
        "closed after {closed:?}"
    );
    dribble.abort();
    // The server is fine.
    assert!(once(addr(&live), HEALTHZ).await.starts_with("HTTP/1.1 200"));
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_is_answered_408_and_closed_at_the_body_timeout() {
    let live = Live::start(limits(16, Duration::from_secs(30))).await;
    let mut s = TcpStream::connect(addr(&live)).await.unwrap();
    let head = format!(
        "PUT /v1/tasks/t HTTP/1.1\r\nhost: ax\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/yaml\r\ncontent-length: 1000\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let (mut reader, mut writer) = s.into_split();
    let dribble = tokio::spawn(async move {
        for _ in 0..100 {
            if writer.write_all(b"#").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the slow body is cut");
    dribble.abort();
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"body_timeout\""), "{answer}");
    assert!(
        closed >= BODY - Duration::from_millis(50) && closed < BODY + Duration::from_secs(1),
        "closed after {closed:?}"
    );
    // Nothing was stored.
    let r = live.call("GET", "/v1/tasks/t", &[], None).await;
    assert_eq!(r.status, 404, "{}", r.text);
    live.stop().await;
}

/// A request with the admin token on a connection kept open; the status line.
async fn with_token(s: &mut TcpStream, path: &str) -> String {
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: ax\r\nauthorization: Bearer {TOKEN}\r\n\r\n");
    s.write_all(request.as_bytes()).await.expect("send");
    // The whole answer (head and `content-length` bytes), so the next one
    // on this connection starts clean.
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        if n == 0 {
            return String::from_utf8_lossy(&got).into_owned();
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_connections_get_503_and_healthz_answers_once_one_frees() {
    let live = Live::start(limits(3, Duration::from_secs(30))).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr(&live)).await.unwrap();
        // A token promotes the connection: it is never evicted, so the cap
        // is really full (silent ones would make room, see below).
        let answer = with_token(&mut s, "/v1/tasks").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(s);
    }
    // Many over the cap, each refused at once and clearly: the accept loop
    // does not wait on any of them.
    let started = Instant::now();
    let refusals = (0..40).map(|_| once(addr(&live), HEALTHZ));
    for answer in futures_join(refusals).await {
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("too_many_connections"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1"),
            "{answer}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // One client leaves: its place is served again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let answer = once(addr(&live), HEALTHZ).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(Instant::now() < deadline, "no place freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_idle_connections() {
    let live = Live::start(limits(16, Duration::from_secs(30))).await;
    let mut kept = TcpStream::connect(addr(&live)).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: ax\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    assert!(kept.read(&mut buf).await.unwrap() > 0);
    let _silent = TcpStream::connect(addr(&live)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), live.stop())
        .await
        .expect("the server stops");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// Opens `n` connections from the test (all 127.0.0.1) and never writes to
/// them; the ones the server has not closed after a moment.
async fn flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut silent = Vec::with_capacity(n);
    for _ in 0..n {
        silent.push(TcpStream::connect(addr).await.expect("connect"));
    }
    // Let the server accept them all (and evict what it evicts).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut open = Vec::new();
    for s in silent {
        let mut buf = [0u8; 1];
        // Closed by the server: the read ends at once (0 or an error).
        if tokio::time::timeout(Duration::from_millis(1), s.peek(&mut buf))
            .await
            .is_err()
        {
            open.push(s);
        }
    }
    open
}

/// A good client's turn during a flood: a request with the token on a
/// fresh connection answers 2xx within a second, `/healthz` and `/readyz`
/// answer 200.
async fn good_clients_are_served(addr: SocketAddr) {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let answer = with_token(&mut s, "/v1/tasks").await;
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    for probe in ["/healthz", "/readyz"] {
        let request = format!("GET {probe} HTTP/1.1\r\nhost: ax\r\nconnection: close\r\n\r\n");
        let answer = once(addr, &request).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{probe}: {answer}");
    }
}

/// The open-file limit, raised to its hard limit: a flood of 600 needs
/// ~1,300 descriptors in this one process (both ends of each socket).
fn raise_open_files(needed: u64) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit only read and write the struct passed.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
            if limit.rlim_cur < needed {
                limit.rlim_cur = limit.rlim_max.min(needed.max(4096));
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
            }
        }
        assert!(
            limit.rlim_cur >= needed,
            "the open-file limit ({}) is under the {needed} this test needs; raise `ulimit -Hn`",
            limit.rlim_cur
        );
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = needed;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_flooding_silent_connections_cannot_lock_out_a_token_or_a_probe() {
    raise_open_files(1500);
    // The defaults (cap 512, 64 anonymous per address); a long idle limit,
    // so only eviction can close the flood's sockets within the test.
    let live = Live::start(|c| {
        c.connections = ConnectionsConfig {
            idle_timeout: Duration::from_secs(60),
            ..ConnectionsConfig::default()
        }
    })
    .await;
    let defaults = ConnectionsConfig::default();
    let open = flood(addr(&live), 600).await;
    // The address holds its share and no more: the rest were evicted.
    assert!(
        open.len() <= defaults.max_anonymous_per_address,
        "{} of the flood still open",
        open.len()
    );
    good_clients_are_served(addr(&live)).await;
    drop(open);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_filling_the_whole_cap_still_makes_room_for_a_token_and_a_probe() {
    raise_open_files(1500);
    // One address may take every place: the cap's own eviction is what
    // lets the good clients in.
    let live = Live::start(|c| {
        c.connections = ConnectionsConfig {
            max_connections: 512,
            max_anonymous_per_address: 512,
            idle_timeout: Duration::from_secs(60),
            ..ConnectionsConfig::default()
        }
    })
    .await;
    let open = flood(addr(&live), 600).await;
    assert!(open.len() <= 512, "{} of the flood still open", open.len());
    assert!(
        open.len() >= 400,
        "only {} held: the cap was not full",
        open.len()
    );
    good_clients_are_served(addr(&live)).await;
    drop(open);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_past_max_per_token_gets_429_and_its_connection_closed() {
    let live = Live::start(|c| {
        c.connections = ConnectionsConfig {
            max_per_token: 2,
            ..ConnectionsConfig::default()
        }
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr(&live)).await.unwrap();
        let answer = with_token(&mut s, "/v1/tasks").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(s);
    }
    // More requests on a connection already counted are fine.
    let again = with_token(&mut held[0], "/v1/tasks").await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");

    let mut third = TcpStream::connect(addr(&live)).await.unwrap();
    let request =
        format!("GET /v1/tasks HTTP/1.1\r\nhost: ax\r\nauthorization: Bearer {TOKEN}\r\n\r\n");
    third.write_all(request.as_bytes()).await.unwrap();
    let (answer, _) = until_closed(&mut third, Instant::now(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("too_many_token_connections"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 1"), "{answer}");
    assert!(lower.contains("connection: close"), "{answer}");

    // Anonymous requests need no place of the token's.
    assert!(once(addr(&live), HEALTHZ).await.starts_with("HTTP/1.1 200"));
    // One of the token's closes: its place is free again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut s = TcpStream::connect(addr(&live)).await.unwrap();
        let answer = with_token(&mut s, "/v1/tasks").await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(Instant::now() < deadline, "the place was not freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    live.stop().await;
}

/// Runs the futures at once and collects their results in order.
async fn futures_join<F: std::future::Future<Output = String> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<String> {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("client task"));
    }
    out
}

/// A request body the handler never reads (here sent a moment after the
/// head) is still unread when the server closes the connection after the
/// answer; the server reads and drops those bytes before it closes, or the
/// kernel would answer the close with a reset that cuts the client's copy
/// of a large answer short (seen as "Peer disconnected" in a test reading a
/// run with a large input after a cancel with a `{}` body).
///
/// The request says `connection: close`, so the server closes after every
/// answer whether or not hyper happened to read the body (on a loaded
/// machine the body can arrive before the answer is written; hyper then
/// reads it and would keep the connection open). The client reads by
/// `content-length`, as an HTTP client does, not until the end of the
/// stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_request_body_does_not_cut_a_large_answer_short() {
    let live = Live::start(limits(16, Duration::from_secs(30))).await;
    let head = format!(
        "GET /v1/openapi.json HTTP/1.1\r\nhost: ax\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n"
    );
    for _ in 0..10 {
        let mut s = TcpStream::connect(addr(&live)).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        s.write_all(b"{}").await.unwrap();
        // Read slowly, as a client busy with what it got would.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let (head, length) = loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .unwrap_or_else(|| panic!("no content-length in {head}"))
                    .parse()
                    .unwrap();
                if got.len() >= end + 4 + length {
                    assert_eq!(got.len(), end + 4 + length, "nothing after the answer");
                    break (head, length);
                }
            }
            match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                Ok(Ok(0)) => panic!("the stream ended after {} bytes", got.len()),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => panic!("after {} bytes: {e}", got.len()),
                Err(_) => panic!("stuck after {} bytes", got.len()),
            }
        };
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(length > 100_000, "a large answer: {length}");
    }
    live.stop().await;
}
