//! The conformance suite against a real PostgreSQL, started by the harness for each test and
//! stopped after it.
//!
//! PostgreSQL frees a session's advisory locks when its connection closes: a crashed client
//! (its runtime shut down, its sockets closed) frees its locks at once, which the suite
//! expects (`frees_on_disconnect`). A frozen one keeps them until its session's
//! `idle_session_timeout`, one ttl.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dlock_core::backend::{BackendUrl, PostgresBackend};
use dlock_core::conformance::{Expectations, Target};
use dlock_core::harness::PostgresServer;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A target whose clients are new `PostgresBackend`s on one harness-started server. The queue
/// probe counts a key's waiters that both a client says it has sent and the server shows
/// queued (`pg_locks` rows not granted), so a waiter counts only once it is in the server's
/// queue.
async fn single() -> Target<PostgresBackend> {
    let server = Arc::new(PostgresServer::start().await.expect("postgres"));
    let url = BackendUrl::parse(&server.url()).expect("harness URL");
    let probe = PostgresBackend::connect(&url, TIMEOUT)
        .await
        .expect("connect");
    let expect = Expectations::of(&probe)
        .ttl(Duration::from_secs(1))
        .slack(Duration::from_millis(500))
        .frees_on_disconnect(true)
        .force_release(false);
    let (admin, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(connection);
    let clients: Arc<Mutex<Vec<Weak<PostgresBackend>>>> = Arc::default();
    let counted = Arc::clone(&clients);
    Target::new(
        move || {
            let (url, server, clients) = (url.clone(), Arc::clone(&server), Arc::clone(&clients));
            async move {
                let _alive = server;
                let client = Arc::new(
                    PostgresBackend::connect(&url, TIMEOUT)
                        .await
                        .expect("connect"),
                );
                clients.lock().unwrap().push(Arc::downgrade(&client));
                client
            }
        },
        expect,
    )
    .with_queue_probe(move |key| {
        let sent: usize = counted
            .lock()
            .unwrap()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|client| client.waiters(key))
            .sum();
        let lock = PostgresBackend::advisory_key(key);
        let queued: i64 = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                admin
                    .query_one(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                         AND objsubid = 1 AND (classid::int8 << 32 | objid::int8) = $1",
                        &[&lock],
                    )
                    .await
                    .expect("pg_locks")
                    .get(0)
            })
        });
        sent.min(usize::try_from(queued).unwrap_or(0))
    })
}

dlock_core::conformance_tests!(pg_single, single());
