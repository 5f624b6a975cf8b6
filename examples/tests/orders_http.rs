//! Runs the `orders_http` example binary and pays one order twice at once, as its docs say.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts the example on a free port and returns it with its base URL.
async fn start_example() -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders_http"))
        .env("PORT", "0")
        .env_remove("DLOCK_URL")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the example printed its address")
        .unwrap()
        .unwrap();
    let url = first.rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paying_one_order_twice_at_once_gives_one_200_and_one_423() {
    let (_child, url) = start_example().await;
    let client = reqwest::Client::new();
    let pay = || client.post(format!("{url}/orders/42/pay")).send();
    let (a, b) = tokio::join!(pay(), pay());
    let mut statuses = [a.unwrap(), b.unwrap()]
        .map(|r| (r.status().as_u16(), r.headers().contains_key("retry-after")));
    statuses.sort();
    assert_eq!(statuses, [(200, false), (423, true)]);

    let other_order = client
        .post(format!("{url}/orders/43/pay"))
        .send()
        .await
        .unwrap();
    assert_eq!(other_order.text().await.unwrap(), "paid order 43\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_waiting_both_payments_succeed_one_after_the_other() {
    let (_child, url) = start_example().await;
    let client = reqwest::Client::new();
    let pay = || client.post(format!("{url}/orders/7/pay-or-wait")).send();
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(pay(), pay());
    assert_eq!(a.unwrap().status(), 200);
    assert_eq!(b.unwrap().status(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "the two payments overlapped"
    );
}
