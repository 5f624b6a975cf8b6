//! The owner-checked primitives, fencing, and key validation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Target;
use super::support::{CountingBackend, key};
use crate::Error;
use crate::backend::LockBackend;
use crate::backend::MAX_KEY_LEN;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease, OwnerId, ReleaseOutcome, RenewOutcome};
use crate::locker::Locker;

async fn grant<B: LockBackend + ?Sized>(client: &B, key: &str, ttl: Duration) -> Lease {
    let request = AcquireRequest::new(key, OwnerId::random("conformance"), ttl);
    match client
        .acquire(&request, Some(Instant::now()))
        .await
        .expect("raw acquire")
    {
        AcquireOutcome::Acquired(lease) => lease,
        busy => panic!("free key `{key}` not granted: {busy:?}"),
    }
}

/// A lease with the right key but another owner can neither release nor renew the lock, and
/// the real holder keeps it.
pub async fn non_owner_release_and_renew_refused<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, forger) = (target.client().await, target.client().await);
    let locker = target.locker().await;
    let user_key = key("owner-check");
    let full_key = locker.backend_key(&user_key).unwrap();
    let lease = grant(&*holder, &full_key, Duration::from_secs(10)).await;
    let mut forged = lease.clone();
    forged.owner = OwnerId::random("forger");

    assert_eq!(
        forger.release(&forged).await.expect("release"),
        ReleaseOutcome::NotHeld
    );
    let renewed = forger
        .renew(std::slice::from_ref(&forged))
        .await
        .expect("renew");
    assert!(
        matches!(renewed.as_slice(), [RenewOutcome::NotOwner]),
        "forged renewal: {renewed:?}"
    );
    assert!(
        matches!(locker.try_lock(&user_key).await, Err(Error::Busy { .. })),
        "the holder lost the lock to a forged release"
    );

    let renewed = holder
        .renew(std::slice::from_ref(&lease))
        .await
        .expect("renew");
    assert!(
        matches!(renewed.as_slice(), [RenewOutcome::Renewed { .. }]),
        "owner's renewal: {renewed:?}"
    );
    assert_eq!(
        holder.release(&lease).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// Releasing twice is harmless, and a stale lease's release never frees the next holder.
pub async fn release_is_idempotent<B: LockBackend + ?Sized>(target: &Target<B>) {
    let client = target.client().await;
    let locker = target.locker().await;
    let user_key = key("idempotent");
    let full_key = locker.backend_key(&user_key).unwrap();
    let first = grant(&*client, &full_key, Duration::from_secs(10)).await;
    assert_eq!(
        client.release(&first).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        client.release(&first).await.expect("second release"),
        ReleaseOutcome::NotHeld
    );

    let second = grant(&*client, &full_key, Duration::from_secs(10)).await;
    assert_eq!(
        client.release(&first).await.expect("stale release"),
        ReleaseOutcome::NotHeld
    );
    assert!(
        matches!(locker.try_lock(&user_key).await, Err(Error::Busy { .. })),
        "a stale release freed the next holder"
    );
    assert_eq!(
        client.release(&second).await.expect("release"),
        ReleaseOutcome::Released
    );

    // The same through guards: a guard whose lock was broken behind its back says so.
    if target.expect.force_release {
        let guard = locker.lock(&user_key).await.expect("acquire");
        assert!(
            client
                .force_release(&full_key)
                .await
                .expect("force_release"),
            "a holder was removed"
        );
        match guard.release().await {
            Err(Error::NotHolder { .. } | Error::LeaseLost { .. }) => {}
            other => {
                panic!("release of a broken lock: expected NotHolder or LeaseLost, got {other:?}")
            }
        }
    }
}

/// Tokens strictly increase across every way of being granted: `lock`, `try_lock`, after a
/// crashed holder's expiry, and by hand-off to a waiter (Lockers with `fencing = true`).
/// Without fencing, there are none.
pub async fn fencing_tokens_strictly_increase<B: LockBackend + ?Sized>(target: &Target<B>) {
    let ttl = target.expect.ttl;
    let (a, b) = (target.fenced_locker().await, target.fenced_locker().await);
    let key = key("fencing");
    let mut tokens = Vec::new();

    let guard = a.lock(&key).await.expect("lock");
    tokens.push(guard.fencing_token());
    guard.release().await.expect("release");

    let guard = b.try_lock(&key).await.expect("try_lock");
    tokens.push(guard.fencing_token());
    drop(guard);

    let guard = a
        .lock(&key)
        .ttl(ttl)
        .watchdog(false)
        .wait(ttl)
        .await
        .expect("lock after drop");
    tokens.push(guard.fencing_token());
    std::mem::forget(guard); // vanish: b gets it after the ttl
    let guard = b
        .lock(&key)
        .wait(ttl * 4 + target.expect.slack)
        .await
        .expect("lock after expiry");
    tokens.push(guard.fencing_token());

    let waiter = tokio::spawn({
        let (a, key) = (a.clone(), key.clone());
        async move {
            a.lock(&key)
                .wait(Duration::from_secs(10))
                .await
                .map(|g| g.fencing_token())
        }
    });
    target.until_queued(&a.backend_key(&key).unwrap(), 1).await;
    guard.release().await.expect("release");
    tokens.push(waiter.await.expect("waiter panicked").expect("hand-off"));

    if target.expect.fencing() {
        let tokens: Vec<u64> = tokens
            .into_iter()
            .map(|t| t.expect("a fencing backend gave no token"))
            .collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "tokens not strictly increasing: {tokens:?}"
        );
    } else {
        assert!(
            tokens.iter().all(Option::is_none),
            "a backend without fencing gave tokens: {tokens:?}"
        );
    }
}

/// Asking for a token: a backend with fencing gives one with the grant; one without fails
/// the acquire with [`Error::Unsupported`] and leaves the key free. A nested acquire that asks
/// for a token shares its hold's grant: it gets the hold's token, or [`Error::Config`] when
/// the hold has none.
pub async fn fencing_on_request<B: LockBackend + ?Sized>(target: &Target<B>) {
    let locker = target.locker().await;
    let key = key("fencing-on-request");
    if !target.expect.fencing() {
        let refused = locker.lock(&key).fencing(true).await;
        assert!(
            matches!(refused, Err(Error::Unsupported { .. })),
            "fencing asked of a backend without tokens: {refused:?}"
        );
        let guard = locker.try_lock(&key).await.expect("the key stayed free");
        guard.release().await.expect("release");
        return;
    }
    let fenced = locker
        .lock(&key)
        .fencing(true)
        .await
        .expect("lock with a token");
    let token = fenced.fencing_token().expect("asked for a token");
    let nested = locker.lock(&key).fencing(true).await.expect("nested");
    assert_eq!(
        nested.fencing_token(),
        Some(token),
        "the nested guard shares the grant"
    );
    drop(nested);
    fenced.release().await.expect("release");

    let plain = locker.lock(&key).await.expect("lock without asking");
    let nested = locker.lock(&key).fencing(true).await;
    match plain.fencing_token() {
        Some(plain_token) => {
            assert!(plain_token > token, "tokens given unasked increase too");
            let nested = nested.expect("nested under a hold with a token");
            assert_eq!(nested.fencing_token(), Some(plain_token));
        }
        None => assert!(
            matches!(nested, Err(Error::Config { ref field, .. }) if field == "fencing"),
            "nested acquire asking for a token its hold lacks: {nested:?}"
        ),
    }
    plain.release().await.expect("release");
    let again = locker
        .lock(&key)
        .fencing(true)
        .await
        .expect("lock with a token");
    assert!(
        again.fencing_token().expect("asked for a token") > token,
        "a grant without a token between two with tokens must not break their order"
    );
    again.release().await.expect("release");
}

/// Empty, oversized and control-character keys are [`Error::InvalidKey`], rejected before any
/// round trip.
pub async fn invalid_keys_are_rejected<B: LockBackend + ?Sized>(target: &Target<B>) {
    let counting = Arc::new(CountingBackend::new(target.client().await));
    let locker = Locker::from_shared_backend(Arc::clone(&counting) as Arc<dyn LockBackend>);
    let oversized = "k".repeat(MAX_KEY_LEN + 1);
    for bad in ["", oversized.as_str(), "line\nbreak"] {
        match locker.lock(bad).await {
            Err(Error::InvalidKey { .. }) => {}
            other => panic!("key {bad:?}: expected InvalidKey, got {other:?}"),
        }
    }
    assert_eq!(counting.acquires(), 0, "an invalid key reached the backend");
    let longest = "k".repeat(MAX_KEY_LEN);
    locker
        .try_lock(&longest)
        .await
        .expect("the longest valid key")
        .release()
        .await
        .expect("release");
}
