//! The raw Redis lock commands the floors send: `SET NX PX` and the compare-and-delete
//! script, for the Redis floor and for each master of the RedLock floor.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;

/// The owner-checked delete.
pub(crate) static COMPARE_AND_DELETE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    )
});

/// `SET key owner NX PX ttl`: whether it was taken.
pub(crate) async fn set_nx_px(
    conn: &mut ConnectionManager,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> bool {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(conn)
        .await
        .expect("SET");
    set.is_some()
}

/// The compare-and-delete script.
pub(crate) async fn compare_and_delete(conn: &mut ConnectionManager, key: &str, owner: &str) {
    let _: i64 = COMPARE_AND_DELETE
        .key(key)
        .arg(owner)
        .invoke_async(conn)
        .await
        .expect("EVALSHA");
}
