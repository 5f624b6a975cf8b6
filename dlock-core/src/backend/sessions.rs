//! Sessions by ttl, written once for the backends whose locks live in a server session (an
//! etcd lease, a ZooKeeper session, a PostgreSQL connection): sessions are kept by requested
//! ttl, shared by the locks of one backend with that ttl (like Go's `concurrency.Session`),
//! opened at their first use and counted by their users. etcd and ZooKeeper use one session
//! per ttl ([`checkout`](Sessions::checkout)); PostgreSQL, whose session can hold a key only
//! once, picks among several the one a lock may use
//! ([`checkout_where`](Sessions::checkout_where)).
//! When the last user is done a session stays, idle, for its [`linger`](PooledSession::linger)
//! — a lock taken meanwhile reuses it, so a Locker that locks one key at a time opens one
//! session, not one per lock — and is then closed, by one task per session. A session that
//! ends by itself (lost) is taken out of use; a shutdown drains them all. The backends keep
//! only their protocol: how to open, keep alive and close a session.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

// Tokio's clock, so that the linger's deadlines follow a paused clock in tests.
use tokio::time::Instant;

use crate::backend::background::Background;
use crate::backend::session_end::SessionEnd;
use crate::error::within;
use crate::{Error, Result};

/// What the pool needs of one session.
pub(crate) trait PooledSession: Send + Sync + 'static {
    /// Whether the session ended (lost or closed), why, and the grants on it.
    fn end(&self) -> &SessionEnd;

    /// Whether a lock may still use the session: by default, until it ended.
    fn usable(&self) -> bool {
        !self.end().is_ended()
    }

    /// How long the session stays open with no user, for the next lock.
    fn linger(&self) -> Duration;

    /// Closes a session no lock uses any more (taken out of the pool already): what the
    /// server keeps for it ends. Runs in the background; the default does nothing (the
    /// session closes when its last handle is dropped).
    fn close(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async {})
    }
}

/// One pooled session and its use.
struct Entry<S> {
    session: Arc<S>,
    /// Locks (held, queued, or being deleted) on the session.
    users: usize,
    /// When the last user left; `None` while in use.
    idle_since: Option<Instant>,
    /// A linger task watches the idle session.
    lingering: bool,
}

/// The sessions in use or lingering, by ttl (several per ttl for PostgreSQL).
type Live<S> = HashMap<Duration, Vec<Entry<S>>>;

/// The pool's state, shared with its linger tasks.
struct Pool<S> {
    live: Mutex<Live<S>>,
    /// Sessions that take no new lock ([`Sessions::retire`]), with their users: each is
    /// closed when its last user is done. Locked after `live` when both are.
    retired: Mutex<Vec<(Arc<S>, usize)>>,
    /// Set by [`Sessions::drain`]: no session is opened or closed by the pool any more.
    drained: AtomicBool,
}

impl<S> Pool<S> {
    fn live(&self) -> MutexGuard<'_, Live<S>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of `session`, with its ttl, if it is live.
    fn find<'a>(live: &'a mut Live<S>, session: &Arc<S>) -> Option<(Duration, &'a mut Entry<S>)> {
        live.iter_mut().find_map(|(&ttl, entries)| {
            entries
                .iter_mut()
                .find(|entry| Arc::ptr_eq(&entry.session, session))
                .map(|entry| (ttl, entry))
        })
    }

    /// Takes `session` out of the live ones; its entry, if it was there.
    fn remove(live: &mut Live<S>, session: &Arc<S>) -> Option<Entry<S>> {
        let (ttl, at) = live.iter().find_map(|(&ttl, entries)| {
            entries
                .iter()
                .position(|entry| Arc::ptr_eq(&entry.session, session))
                .map(|at| (ttl, at))
        })?;
        let entries = live.get_mut(&ttl).expect("found above");
        let entry = entries.swap_remove(at);
        if entries.is_empty() {
            live.remove(&ttl);
        }
        Some(entry)
    }

    fn retired(&self) -> MutexGuard<'_, Vec<(Arc<S>, usize)>> {
        self.retired.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sessions of one backend, by requested ttl.
pub(crate) struct Sessions<S> {
    backend: &'static str,
    timeout: Duration,
    pool: Arc<Pool<S>>,
    /// Serialises opens, so concurrent first acquires with one ttl share one session.
    opening: tokio::sync::Mutex<()>,
    background: Background,
}

impl<S> std::fmt::Debug for Sessions<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("ttls", &self.pool.live().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<S: PooledSession> Sessions<S> {
    /// The sessions of `backend` (its name, for errors), opening each within `timeout`, and
    /// lingering in `background`.
    pub(crate) fn new(backend: &'static str, timeout: Duration, background: Background) -> Self {
        Self {
            backend,
            timeout,
            pool: Arc::new(Pool {
                live: Mutex::default(),
                retired: Mutex::default(),
                drained: AtomicBool::new(false),
            }),
            opening: tokio::sync::Mutex::new(()),
            background,
        }
    }

    /// The live session for `ttl`, if there is one (no use is counted).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn live(&self, ttl: Duration) -> Option<Arc<S>> {
        self.pool
            .live()
            .get(&ttl)?
            .iter()
            .find(|entry| entry.session.usable())
            .map(|entry| Arc::clone(&entry.session))
    }

    /// Every live session, of every ttl (no use is counted).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn every(&self) -> Vec<Arc<S>> {
        self.pool
            .live()
            .values()
            .flatten()
            .map(|entry| Arc::clone(&entry.session))
            .collect()
    }

    /// The usable session of `ttl` that `rank` ranks highest (`None`: it may not be used),
    /// with one more user, after `take` (both run under the pool's lock, so no other
    /// checkout sees the session between them).
    fn reuse(
        &self,
        ttl: Duration,
        rank: &impl Fn(&S) -> Option<usize>,
        take: &impl Fn(&S),
    ) -> Option<Arc<S>> {
        let mut live = self.pool.live();
        let entry = live
            .get_mut(&ttl)?
            .iter_mut()
            .filter(|entry| entry.session.usable())
            .filter_map(|entry| Some((rank(&entry.session)?, entry)))
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, entry)| entry)?;
        take(&entry.session);
        entry.users += 1;
        entry.idle_since = None;
        Some(Arc::clone(&entry.session))
    }

    /// A session for `ttl` with one more user: the live one, or a new one from `open` (then
    /// the `bool` is `true`: the caller starts what keeps it alive).
    ///
    /// # Errors
    ///
    /// [`Error::ShutDown`] once the pool was drained; [`Error::Timeout`] when another open
    /// takes longer than the operation timeout; else `open`'s error.
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) async fn checkout<F, Fut, T>(&self, ttl: Duration, open: F) -> Result<(Arc<S>, bool)>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
        T: Into<Arc<S>>,
    {
        self.checkout_where(ttl, |_| Some(0), |_| {}, open).await
    }

    /// A session for `ttl` with one more user: of the live ones a lock may use (`rank` is
    /// `Some`), the one ranked highest, else a new one from `open` (then the `bool` is `true`:
    /// the caller starts what keeps it alive); `take` runs on it under the pool's lock, so
    /// that what it reserves there is seen by the next checkout's `rank`. A new session must
    /// be ranked usable.
    ///
    /// # Errors
    ///
    /// As [`checkout`](Self::checkout).
    pub(crate) async fn checkout_where<F, Fut, T>(
        &self,
        ttl: Duration,
        rank: impl Fn(&S) -> Option<usize>,
        take: impl Fn(&S),
        open: F,
    ) -> Result<(Arc<S>, bool)>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
        T: Into<Arc<S>>,
    {
        // An acquire still in flight when the Locker shut down must not open a session again.
        if self.pool.drained.load(Ordering::SeqCst) {
            return Err(Error::ShutDown);
        }
        if let Some(session) = self.reuse(ttl, &rank, &take) {
            return Ok((session, false));
        }
        let _opening = within(
            self.backend,
            "open session",
            self.timeout,
            self.opening.lock(),
        )
        .await?;
        if let Some(session) = self.reuse(ttl, &rank, &take) {
            return Ok((session, false));
        }
        let session: Arc<S> = open().await?.into();
        if self.pool.drained.load(Ordering::SeqCst) {
            Arc::clone(&session).close().await;
            return Err(Error::ShutDown);
        }
        debug_assert!(rank(&session).is_some(), "a new session is usable");
        take(&session);
        let mut live = self.pool.live();
        let entries = live.entry(ttl).or_default();
        // Sessions that ended are dropped here: nothing more to close.
        entries.retain(|entry| entry.session.usable());
        entries.push(Entry {
            session: Arc::clone(&session),
            users: 1,
            idle_since: None,
            lingering: false,
        });
        Ok((session, true))
    }

    /// `more` users of `session` besides the one that checked it out (several grants of one
    /// request, each checked in by its own release) — whether it is still live or was retired
    /// meanwhile (a retired session closes with its last user, so each must be counted).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn add_users(&self, session: &Arc<S>, more: usize) {
        if let Some((_, entry)) = Pool::find(&mut self.pool.live(), session) {
            entry.users += more;
            return;
        }
        if let Some((_, users)) = self
            .pool
            .retired()
            .iter_mut()
            .find(|(s, _)| Arc::ptr_eq(s, session))
        {
            *users += more;
        }
    }

    /// One user of `session` is done. When it was the last, the session lingers, idle (one
    /// task per session watches it), and is closed unless a lock took it up again meanwhile.
    pub(crate) fn checkin(&self, session: &Arc<S>) {
        let mut live = self.pool.live();
        let Some((_, entry)) = Pool::find(&mut live, session) else {
            drop(live);
            self.checkin_retired(session);
            return;
        };
        entry.users = entry.users.saturating_sub(1);
        if entry.users > 0 {
            return;
        }
        if !session.usable() {
            Pool::remove(&mut live, session); // ended, or ending: nothing to close
            return;
        }
        entry.idle_since = Some(Instant::now());
        if std::mem::replace(&mut entry.lingering, true) {
            return; // its linger task is still watching
        }
        drop(live);
        let (pool, session) = (Arc::downgrade(&self.pool), Arc::clone(session));
        let _ = self.background.spawn(linger(pool, session));
    }

    /// One user of a retired `session` is done; the last one closes it.
    fn checkin_retired(&self, session: &Arc<S>) {
        let mut retired = self.pool.retired();
        let Some(index) = retired.iter().position(|(s, _)| Arc::ptr_eq(s, session)) else {
            return; // out of use already: lost or drained
        };
        retired[index].1 = retired[index].1.saturating_sub(1);
        if retired[index].1 == 0 {
            let (session, _) = retired.swap_remove(index);
            drop(retired);
            self.close_unless_ended(session);
        }
    }

    fn close_unless_ended(&self, session: Arc<S>) {
        if !session.end().is_ended() {
            let _ = self.background.spawn(session.close());
        }
    }

    /// Takes `session` out of use (it was lost), so the next checkout opens a new one.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn forget(&self, session: &Arc<S>) {
        Pool::remove(&mut self.pool.live(), session);
        self.pool
            .retired()
            .retain(|(s, _)| !Arc::ptr_eq(s, session));
    }

    /// Takes `session` out of use for new locks, but not for the ones on it: the next checkout
    /// opens a new session, and this one is closed as soon as its last user is done (not
    /// after a linger). For a session the server may still attach a record to after the
    /// caller gave up on the request (a reply lost, a request still on its way to a frozen
    /// member): closing it ends that record too, wherever it lands.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn retire(&self, session: &Arc<S>) {
        let mut live = self.pool.live();
        let Some(entry) = Pool::remove(&mut live, session) else {
            return; // out of use already: lost, replaced, retired or drained
        };
        if entry.users == 0 {
            drop(live);
            self.close_unless_ended(entry.session);
        } else {
            self.pool.retired().push((entry.session, entry.users));
        }
    }

    /// Every session, taken out of use for good (the backend is shutting down): the caller
    /// ends them.
    pub(crate) fn drain(&self) -> Vec<Arc<S>> {
        self.pool.drained.store(true, Ordering::SeqCst);
        let mut sessions: Vec<Arc<S>> = self
            .pool
            .live()
            .drain()
            .flat_map(|(_, entries)| entries)
            .map(|entry| entry.session)
            .collect();
        sessions.extend(self.pool.retired().drain(..).map(|(session, _)| session));
        sessions
    }
}

/// Watches an idle `session`: closes it once it has been idle for its linger, unless a lock
/// took it up again (the task then ends; the next idle spell starts another) or it ended.
async fn linger<S: PooledSession>(pool: Weak<Pool<S>>, session: Arc<S>) {
    let linger = session.linger();
    loop {
        let Some(state) = pool.upgrade() else {
            return; // the backend is gone: its shutdown ended every session
        };
        let close_at = {
            let mut live = state.live();
            let Some((_, entry)) = Pool::find(&mut live, &session) else {
                return; // lost, replaced or drained
            };
            let Some(idle_since) = entry.idle_since else {
                entry.lingering = false;
                return; // in use again
            };
            if idle_since + linger <= Instant::now() || !session.usable() {
                Pool::remove(&mut live, &session);
                None
            } else {
                Some(idle_since + linger)
            }
        };
        drop(state);
        let Some(close_at) = close_at else {
            if !session.end().is_ended() {
                session.close().await;
            }
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(close_at) => {}
            () = session.end().ended() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[derive(Debug)]
    struct Fake {
        end: SessionEnd,
        closed: Arc<AtomicUsize>,
    }

    impl PooledSession for Fake {
        fn end(&self) -> &SessionEnd {
            &self.end
        }

        fn linger(&self) -> Duration {
            Duration::from_secs(1)
        }

        fn close(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            self.closed.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    /// A pool of fakes, and how many it closed.
    fn pool() -> (Sessions<Fake>, Arc<AtomicUsize>) {
        let sessions = Sessions::new("test", Duration::from_secs(1), Background::new());
        (sessions, Arc::new(AtomicUsize::new(0)))
    }

    /// A new fake session, counted in `closed` when it is closed.
    async fn new_fake(closed: &Arc<AtomicUsize>) -> Result<Fake> {
        Ok(Fake {
            end: SessionEnd::new(),
            closed: Arc::clone(closed),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn one_session_per_ttl_lingers_once_idle_then_closes() {
        let (sessions, closed) = pool();
        let open = || new_fake(&closed);
        let ttl = Duration::from_secs(3);
        let (a, opened) = sessions.checkout(ttl, open).await.unwrap();
        assert!(opened);
        let (b, opened) = sessions.checkout(ttl, open).await.unwrap();
        assert!(!opened && Arc::ptr_eq(&a, &b), "one session per ttl");
        sessions.checkin(&a);
        sessions.checkin(&b);
        // Idle: taken up again before its linger ran out, by the same session.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (c, opened) = sessions.checkout(ttl, open).await.unwrap();
        assert!(!opened && Arc::ptr_eq(&a, &c));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(closed.load(Ordering::SeqCst), 0, "closed while in use");
        sessions.checkin(&c);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(closed.load(Ordering::SeqCst), 1, "closed after its linger");
        assert!(sessions.live(ttl).is_none());
        let (d, opened) = sessions.checkout(ttl, open).await.unwrap();
        assert!(
            opened && !Arc::ptr_eq(&a, &d),
            "a new session after the close"
        );
        assert_eq!(sessions.drain().len(), 1);
        assert!(matches!(
            sessions.checkout(ttl, open).await,
            Err(Error::ShutDown)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retired_session_takes_no_new_lock_and_closes_with_its_last_user() {
        let (sessions, closed) = pool();
        let open = || new_fake(&closed);
        let ttl = Duration::from_secs(3);
        let (a, _) = sessions.checkout(ttl, open).await.unwrap();
        let (b, _) = sessions.checkout(ttl, open).await.unwrap();
        sessions.retire(&a);
        let (c, opened) = sessions.checkout(ttl, open).await.unwrap();
        assert!(
            opened && !Arc::ptr_eq(&a, &c),
            "a new lock on a retired session"
        );
        sessions.checkin(&a);
        tokio::task::yield_now().await;
        assert_eq!(closed.load(Ordering::SeqCst), 0, "closed while in use");
        sessions.checkin(&b);
        tokio::task::yield_now().await;
        assert_eq!(
            closed.load(Ordering::SeqCst),
            1,
            "closed with its last user, not lingering"
        );
        // An idle session retired closes at once; a drain includes what is retired.
        sessions.checkin(&c);
        sessions.retire(&c);
        tokio::task::yield_now().await;
        assert_eq!(closed.load(Ordering::SeqCst), 2);
        let (d, _) = sessions.checkout(ttl, open).await.unwrap();
        sessions.retire(&d);
        assert!(sessions.drain().iter().any(|s| Arc::ptr_eq(s, &d)));
    }

    /// Users added to a session retired after its checkout (the grants of a set on one
    /// session) are each counted: it closes with the last of them, not the first.
    #[tokio::test(start_paused = true)]
    async fn users_added_to_a_retired_session_keep_it_open_until_the_last() {
        let (sessions, closed) = pool();
        let open = || new_fake(&closed);
        let (a, _) = sessions
            .checkout(Duration::from_secs(3), open)
            .await
            .unwrap();
        sessions.retire(&a);
        sessions.add_users(&a, 2);
        for done in 1..=2 {
            sessions.checkin(&a);
            tokio::task::yield_now().await;
            assert_eq!(
                closed.load(Ordering::SeqCst),
                0,
                "closed after {done} of 3 users"
            );
        }
        sessions.checkin(&a);
        tokio::task::yield_now().await;
        assert_eq!(
            closed.load(Ordering::SeqCst),
            1,
            "closed with its last user"
        );
    }

    /// PostgreSQL's way: several sessions of one ttl, the one a lock may use picked by rank,
    /// with what `take` reserves seen by the next checkout; each lingers on its own.
    #[tokio::test(start_paused = true)]
    async fn sessions_picked_by_rank_share_a_ttl_and_linger_each() {
        let (sessions, closed) = pool();
        let open = || new_fake(&closed);
        let ttl = Duration::from_secs(3);
        // A session "holds key 1" once taken for it: the next lock on key 1 needs another.
        let holds = &Mutex::new(Vec::<(usize, u32)>::new());
        let id = |s: &Fake| std::ptr::from_ref(s).addr();
        let holds_key = move |s: &Fake, key| holds.lock().unwrap().contains(&(id(s), key));
        let rank_for = move |key| move |s: &Fake| (!holds_key(s, key)).then_some(0);
        let take_for = move |key| move |s: &Fake| holds.lock().unwrap().push((id(s), key));
        let (a, opened) = sessions
            .checkout_where(ttl, rank_for(1), take_for(1), open)
            .await
            .unwrap();
        assert!(opened);
        let (b, opened) = sessions
            .checkout_where(ttl, rank_for(1), take_for(1), open)
            .await
            .unwrap();
        assert!(opened && !Arc::ptr_eq(&a, &b), "key 1 twice on one session");
        let (c, opened) = sessions
            .checkout_where(ttl, rank_for(2), take_for(2), open)
            .await
            .unwrap();
        assert!(!opened, "key 2 shares a session");
        assert!(Arc::ptr_eq(&c, &a) || Arc::ptr_eq(&c, &b));
        sessions.checkin(&c);
        assert_eq!(sessions.every().len(), 2);
        sessions.checkin(&a);
        tokio::time::sleep(Duration::from_millis(500)).await;
        sessions.checkin(&b);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            closed.load(Ordering::SeqCst),
            1,
            "the first idle one closed"
        );
        let left = sessions.every();
        assert!(left.len() == 1 && Arc::ptr_eq(&left[0], &b));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(closed.load(Ordering::SeqCst), 2);
        assert!(sessions.every().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_session_is_replaced_and_never_closed() {
        let (sessions, closed) = pool();
        let open = || new_fake(&closed);
        let ttl = Duration::from_secs(3);
        let (a, _) = sessions.checkout(ttl, open).await.unwrap();
        sessions.checkin(&a);
        let _ = a.end.end("expired");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (b, opened) = sessions.checkout(ttl, open).await.unwrap();
        assert!(opened && !Arc::ptr_eq(&a, &b));
        assert_eq!(
            closed.load(Ordering::SeqCst),
            0,
            "a lost session is not closed"
        );
    }
}
