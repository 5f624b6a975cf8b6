//! Leader election ([`Locker::campaign`], [`Locker::observe`]): one leader at a time, terms
//! that only grow, observers that see each leader in order, a proclaim checked on the server,
//! a prompt hand-over on resign, and a paused leader that wakes deposed. On a backend without
//! election, each scenario checks instead that asking for it fails with
//! [`Error::Unsupported`] before any round trip.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::Target;
use super::support::{UnsafeCounter, assert_between, key};
use crate::backend::LockBackend;
use crate::{Error, Leader, Locker};

/// A lease far longer than any scenario: what happens within it comes from notifications and
/// releases, never from an expiry.
const LONG: Duration = Duration::from_secs(30);

/// Whether the target elects leaders; if not, checks that a campaign, a leader read and an
/// observer are refused as unsupported without a round trip.
async fn elects<B: LockBackend + ?Sized>(target: &Target<B>) -> bool {
    if target.expect.capabilities.election {
        return true;
    }
    let (counting, locker) = target.counting_locker().await;
    let name = key("unsupported-election");
    let campaign = locker.campaign(&name, "a").await;
    assert!(
        matches!(campaign, Err(Error::Unsupported { .. })),
        "a campaign on a backend without election: {campaign:?}"
    );
    let leader = locker.leader(&name).await;
    assert!(
        matches!(leader, Err(Error::Unsupported { .. })),
        "a leader read on a backend without election: {leader:?}"
    );
    let mut observed = Box::pin(locker.observe(&name));
    let first = observed.next().await;
    assert!(
        matches!(first, Some(Err(Error::Unsupported { .. }))),
        "an observer on a backend without election: {first:?}"
    );
    assert!(observed.next().await.is_none(), "the observer goes on");
    assert_eq!(
        counting.acquires(),
        0,
        "an unsupported request made a round trip"
    );
    false
}

/// Five candidates on five clients campaign for one name, four terms each, and do a
/// non-atomic read-sleep-write on a shared resource while leading, stamped with their term:
/// no two ever lead at once (no overlap, no lost update), every term is greater than the one
/// before, and each candidate gets its turns.
pub async fn election_has_one_leader_at_a_time<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !elects(target).await {
        return;
    }
    const CANDIDATES: usize = 5;
    const TERMS: usize = 4;
    let name = key("one-leader");
    let resource = Arc::new(UnsafeCounter::default());
    let mut campaigns = Vec::new();
    for candidate in 0..CANDIDATES {
        let locker = target.locker().await;
        let (name, resource) = (name.clone(), Arc::clone(&resource));
        campaigns.push(tokio::spawn(async move {
            for _ in 0..TERMS {
                let leading = locker
                    .campaign(&name, format!("candidate-{candidate}"))
                    .await
                    .expect("campaign");
                let term = leading.term();
                leading
                    .run(resource.increment(candidate, Some(term), Duration::from_millis(5)))
                    .await
                    .expect("the leadership held while its work ran");
                leading.resign().await.expect("resign");
            }
        }));
    }
    for campaign in campaigns {
        campaign.await.expect("a candidate panicked");
    }
    assert_eq!(resource.overlaps(), Vec::new(), "two leaders at once");
    assert_eq!(
        resource.stale_tokens(),
        Vec::new(),
        "a term not above the last"
    );
    assert_eq!(
        resource.value(),
        (CANDIDATES * TERMS) as u64,
        "lost updates"
    );
    let locker = target.locker().await;
    assert_eq!(
        locker.leader(&name).await.expect("leader"),
        None,
        "a leader left behind"
    );
}

/// Three candidates queue for one name while another client observes it: the observer sees
/// nobody, then each leader in turn — its value and term, terms growing — each within the
/// slack of its election, then nobody again once the last resigned.
pub async fn observers_see_each_leader_in_order<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !elects(target).await {
        return;
    }
    let name = key("observed");
    let observer = target.locker().await;
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let observing = tokio::spawn({
        let name = name.clone();
        async move {
            let mut leaders = Box::pin(observer.observe(&name));
            while let Some(leader) = leaders.next().await {
                if seen_tx.send(leader.expect("observe")).is_err() {
                    return;
                }
            }
        }
    });
    assert_eq!(
        seen_rx.recv().await.expect("observer"),
        None,
        "a leader of a new name"
    );
    let first = target.locker().await;
    // Long leases: each change must reach the observer by a notification, not by the
    // re-read it makes when a leader's lease would run out.
    let leading = first
        .campaign(&name, "first")
        .ttl(LONG)
        .await
        .expect("campaign");
    let mut others = Vec::new();
    for value in ["second", "third"] {
        let (locker, candidate_name) = (target.locker().await, name.clone());
        others.push(tokio::spawn(async move {
            let leading = locker
                .campaign(&candidate_name, value)
                .ttl(LONG)
                .await
                .expect("campaign");
            (leading, locker)
        }));
        // Queued in this order before the first resigns.
        target
            .until_queued(&format!("{}{name}", target.expect.prefix), others.len())
            .await;
    }
    let mut expected_terms = Vec::new();
    let mut next = Some(leading);
    for value in ["first", "second", "third"] {
        let leading = next.take().expect("a leader");
        // Nobody may lead for a moment between two leaders; the next leader shows promptly.
        let seen = tokio::time::timeout(target.expect.slack * 4, async {
            loop {
                if let Some(leader) = seen_rx.recv().await.expect("observer") {
                    return leader;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the observer did not see {value} lead"));
        assert_eq!(
            seen,
            Leader {
                value: value.to_owned(),
                term: leading.term(),
            },
            "the observer's leader"
        );
        expected_terms.push(leading.term());
        leading.resign().await.expect("resign");
        if !others.is_empty() {
            let (leading, _locker) = others.remove(0).await.expect("candidate");
            next = Some(leading);
        }
    }
    assert!(
        expected_terms.windows(2).all(|w| w[0] < w[1]),
        "terms did not grow: {expected_terms:?}"
    );
    let last = tokio::time::timeout(target.expect.slack * 4, seen_rx.recv())
        .await
        .expect("the observer did not see the last leader resign")
        .expect("observer");
    assert_eq!(last, None, "a leader after the last resigned");
    observing.abort();
}

/// A leader proclaims a new value, which everyone reads at once; once it has resigned, a
/// proclaim with its grant is refused on the server and changes nothing, and its
/// [`Leadership`](crate::Leadership) stopped claiming to lead.
pub async fn proclaim_is_only_for_the_leader<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !elects(target).await {
        return;
    }
    let name = key("proclaim");
    let (a, b) = (target.locker().await, target.locker().await);
    let mut leading = a.campaign(&name, "a").await.expect("campaign");
    leading.proclaim("a, draining").await.expect("proclaim");
    let leader = b.leader(&name).await.expect("leader").expect("a leader");
    assert_eq!(leader.value, "a, draining", "the proclaimed value");
    assert_eq!(leader.term, leading.term(), "a proclaim keeps the term");
    let old_grant = leading.guard().lease().clone();
    leading.resign().await.expect("resign");
    let next = b.campaign(&name, "b").await.expect("campaign");
    let stale = a
        .backend()
        .proclaim(&old_grant, "a again")
        .await
        .expect("a proclaim answered");
    assert!(!stale, "a resigned leader's proclaim was accepted");
    let leader = a.leader(&name).await.expect("leader").expect("a leader");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("b", next.term()),
        "a resigned leader's proclaim changed the leader"
    );
    next.resign().await.expect("resign");
}

/// A leader's resign hands the name over to the next candidate in line within the slack,
/// with a greater term.
pub async fn resign_hands_over_promptly<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !elects(target).await {
        return;
    }
    let name = key("resign");
    let (a, b) = (target.locker().await, target.locker().await);
    // A long lease: the hand-over must come from the resign, not from the lease's end.
    let leading = a.campaign(&name, "a").ttl(LONG).await.expect("campaign");
    let first_term = leading.term();
    let waiting = tokio::spawn({
        let name = name.clone();
        async move {
            let leading = b.campaign(&name, "b").ttl(LONG).await;
            (leading, Instant::now(), b)
        }
    });
    target
        .until_queued(&format!("{}{name}", target.expect.prefix), 1)
        .await;
    let resigned = Instant::now();
    leading.resign().await.expect("resign");
    let (next, elected, _b) = waiting.await.expect("candidate");
    let next = next.expect("the next candidate is elected");
    assert_between(
        "hand-over on resign",
        elected - resigned,
        Duration::ZERO,
        target.expect.slack,
    );
    assert!(
        next.term() > first_term,
        "term {} after {first_term}",
        next.term()
    );
    next.resign().await.expect("resign");
}

/// A leader whose whole client freezes (its runtime blocked) past its lease: another
/// candidate is elected meanwhile; when the frozen one wakes it is no leader, its work was
/// cancelled at its next await, and the write it then attempts with its old term is refused
/// by a resource that keeps the highest term it saw.
pub async fn paused_leader_wakes_deposed<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !elects(target).await {
        return;
    }
    let ttl = target.expect.ttl;
    let pause = ttl * 2 + target.expect.slack;
    let name = key("paused-leader");
    let resource = Arc::new(UnsafeCounter::default());
    let make_locker = target.locker_maker();
    let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
    let (leader_name, leader_resource) = (name.clone(), Arc::clone(&resource));
    let frozen = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the leader");
        runtime.block_on(async move {
            let locker: Locker = make_locker().await;
            let leading = locker
                .campaign(&leader_name, "frozen")
                .await
                .expect("campaign");
            let term = leading.term();
            let mut resumed = false;
            let outcome = leading
                .run(async {
                    tokio::time::sleep(ttl / 10).await; // leading, under way
                    paused_tx
                        .send(())
                        .expect("the scenario waits for the pause");
                    std::thread::sleep(pause); // the whole client freezes
                    tokio::task::yield_now().await; // the next await point
                    resumed = true;
                })
                .await;
            let still_leader = leading.is_leader();
            // What a careless leader does next: write with the term it had.
            leader_resource
                .increment(0, Some(term), Duration::ZERO)
                .await;
            (outcome, resumed, still_leader, term)
        })
    });
    paused_rx.await.expect("the leader starts its work");
    let rival = target.locker().await;
    let next = rival
        .campaign(&name, "rival")
        .wait(pause)
        .await
        .expect("a frozen leader's lease ends at its ttl");
    resource
        .increment(1, Some(next.term()), Duration::ZERO)
        .await;
    let (outcome, resumed, still_leader, old_term) =
        tokio::task::spawn_blocking(move || frozen.join())
            .await
            .expect("join")
            .expect("the leader's thread panicked");
    assert!(
        !resumed,
        "the leader's work resumed after a pause past its lease"
    );
    assert!(
        matches!(outcome, Err(Error::LeaseLost { .. })),
        "the thawed leader was not told it lost: {outcome:?}"
    );
    assert!(!still_leader, "the thawed leader still claims to lead");
    assert!(
        next.term() > old_term,
        "term {} after {old_term}",
        next.term()
    );
    assert_eq!(
        resource.stale_tokens(),
        vec![(old_term, next.term())],
        "the deposed leader's write was not the one refused"
    );
    assert!(next.is_leader(), "the new leader lost to the thawed one");
    next.resign().await.expect("resign");
}

/// What one leadership reported by [`Locker::lead`] looked like.
#[derive(Debug, Clone)]
struct Reported {
    value: &'static str,
    term: u64,
    /// The service showed this candidate as leader with this term when its work began.
    confirmed: bool,
    began: Instant,
}

/// Every client's session is ended on the service while one candidate leads and another
/// waits, then the service is reachable again (`end_sessions`: on a target of its own, e.g. a
/// proxy that cuts every connection for longer than the sessions' lease): the leader's work
/// is cancelled; the waiting candidate — whose place in line went with its session, etcd's
/// zombie candidate — never reports a leadership the service does not show; both campaign
/// again ([`Locker::lead`]) and one leads, with a greater term, confirmed by the service.
/// `checker` reads the service without going through the cut (with the target's prefix).
///
/// Not in [`conformance_tests!`](crate::conformance_tests): it needs a service of its own.
///
/// # Panics
///
/// When the scenario fails.
pub async fn killed_sessions_campaign_again<B, F, Fut>(
    target: &Target<B>,
    checker: Locker,
    end_sessions: F,
) where
    B: LockBackend + ?Sized,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    assert!(
        target.expect.capabilities.election,
        "a target without election"
    );
    let name = key("killed-campaign");
    let reports = Arc::new(std::sync::Mutex::new(Vec::<Reported>::new()));
    let ended = Arc::new(std::sync::Mutex::new(Vec::<(u64, Instant)>::new()));
    let (reported_tx, mut reported_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut lockers = Vec::new();
    let mut campaigns = Vec::new();
    for value in ["a", "b"] {
        let locker = target.locker().await;
        lockers.push(locker.clone());
        let (led, checker) = (name.clone(), checker.clone());
        let (reports, ended, reported_tx) = (
            Arc::clone(&reports),
            Arc::clone(&ended),
            reported_tx.clone(),
        );
        campaigns.push(tokio::spawn(async move {
            locker
                .lead(&led, value, |leader| {
                    let (name, checker, reports, ended, reported_tx) = (
                        led.clone(),
                        checker.clone(),
                        Arc::clone(&reports),
                        Arc::clone(&ended),
                        reported_tx.clone(),
                    );
                    async move {
                        let shown = checker.leader(&name).await;
                        let confirmed = matches!(
                            &shown,
                            Ok(Some(Leader { value: shown, term })) if shown == value && *term == leader.term
                        );
                        let report = Reported {
                            value,
                            term: leader.term,
                            confirmed,
                            began: Instant::now(),
                        };
                        reports.lock().expect("reports").push(report.clone());
                        let _ = reported_tx.send(report);
                        // Leads until cancelled; the guard notes when.
                        let _ended = EndedAt(leader.term, ended);
                        std::future::pending::<()>().await;
                    }
                })
                .await
        }));
        if value == "a" {
            let first = reported_rx.recv().await.expect("a reports");
            assert_eq!(first.value, "a", "the first candidate leads");
        }
    }
    target
        .until_queued(&format!("{}{name}", target.expect.prefix), 1)
        .await;
    let first_term = reports.lock().expect("reports")[0].term;
    end_sessions().await;
    let bound = target.expect.ttl * 6 + target.expect.slack * 10;
    let next = tokio::time::timeout(bound, async {
        loop {
            let report = reported_rx.recv().await.expect("reports");
            if report.term > first_term {
                return report;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("nobody led again within {bound:?} of the sessions' end"));
    let reports = reports.lock().expect("reports").clone();
    assert!(
        reports.iter().all(|report| report.confirmed),
        "a leadership reported that the service did not show: {reports:?}"
    );
    assert!(
        reports.windows(2).all(|w| w[0].term < w[1].term),
        "terms did not grow: {reports:?}"
    );
    let first_ended = ended
        .lock()
        .expect("ended")
        .iter()
        .find(|(term, _)| *term == first_term)
        .map(|(_, at)| *at);
    assert!(
        first_ended.is_some_and(|at| at <= next.began),
        "the first leader's work was not cancelled before the next leader began: {first_ended:?}"
    );
    for locker in &lockers {
        locker.shutdown().await.expect("shutdown");
    }
    for campaign in campaigns {
        campaign
            .await
            .expect("a candidate panicked")
            .expect("lead ends with Ok at shutdown");
    }
}

/// Notes when a leader's work ended (it is dropped when cancelled).
struct EndedAt(u64, Arc<std::sync::Mutex<Vec<(u64, Instant)>>>);

impl Drop for EndedAt {
    fn drop(&mut self) {
        self.1.lock().expect("ended").push((self.0, Instant::now()));
    }
}
