//! The protected resource: a counter that workers read and write under the lock, served over
//! loopback TCP by the runner, which records every step with its own clock and checks the
//! fencing token of every read and write.
//!
//! One line per message, one connection per worker process:
//!
//! | Worker sends | Resource answers | Meaning |
//! |---|---|---|
//! | `HELLO <worker>` | – | who is on this connection |
//! | `BEGIN <seq> <token>` | `OK <value>` or `STALE` | the critical section starts: read the counter |
//! | `WRITE <seq> <token> <read> <held>` | `OK` or `STALE` | write `read + 1`; `held` is `guard.is_held()` just before |
//! | `END <seq>` | – | the critical section is over (also after a cancelled one) |
//! | `LOST <seq>` | – | the guard reported its lease lost during the section |
//! | `ERROR <what> <kind>` | – | an acquire or release failed with this error kind |
//!
//! `<token>` is the grant's fencing token, or `-` where the backend has none. A read or write
//! whose token is below the highest token seen is refused (`STALE`): the fence of Kleppmann's
//! "How to do distributed locking", which the resource enforces whenever tokens come.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::faults::Fault;

/// One critical section as the resource saw it.
#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub(crate) worker: usize,
    /// When its read arrived, and whether the fence let it through.
    pub(crate) begin: Instant,
    pub(crate) begin_accepted: bool,
    /// When an accepted write arrived.
    pub(crate) written: Option<Instant>,
    pub(crate) end: Option<Instant>,
}

impl Section {
    /// The last moment the resource heard of this section (a write on a worker's old
    /// connection may arrive after the end sent on its new one).
    pub(crate) fn last_seen(&self) -> Instant {
        [self.end, self.written]
            .into_iter()
            .flatten()
            .fold(self.begin, Instant::max)
    }
}

/// A fault as the resource's clock saw it: which, from injection to healing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultWindow {
    pub(crate) fault: Fault,
    pub(crate) start: Instant,
    pub(crate) healed: Instant,
}

/// Everything recorded during one run, and the counts taken as it went.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) sections: Vec<Section>,
    pub(crate) faults: Vec<FaultWindow>,
    /// Reads and writes the fence refused.
    pub(crate) stale_rejected: u64,
    /// When accepted writes arrived whose read was not the counter's value any more.
    pub(crate) lost_updates: Vec<Instant>,
    /// When grants arrived with a token another grant had already shown.
    pub(crate) duplicate_tokens: Vec<Instant>,
    /// When writes arrived that were sent while the worker's guard said the lease was gone.
    pub(crate) writes_after_loss: Vec<Instant>,
    /// Leases the guards reported lost.
    pub(crate) losses: u64,
    /// Failed acquires and releases, by error kind.
    pub(crate) errors: BTreeMap<String, u64>,
    /// The counter the workers increment.
    value: u64,
    /// The highest fencing token seen: the fence.
    max_token: Option<u64>,
    /// The grant (worker, sequence number) that first showed each token.
    token_owner: HashMap<u64, (usize, u64)>,
    /// Where each grant's section is in `sections`.
    by_seq: HashMap<(usize, u64), usize>,
    /// The grant whose accepted section is open, if any.
    open: Option<(usize, u64)>,
}

impl History {
    /// Whether the fence lets `token` through (and raises the bar to it).
    fn admit(&mut self, token: Option<u64>) -> bool {
        let Some(token) = token else {
            return true; // nothing to check against: an unfenced backend
        };
        if self.max_token.is_some_and(|max| token < max) {
            self.stale_rejected += 1;
            return false;
        }
        self.max_token = Some(token);
        true
    }

    /// A section starts: the counter's value, or `None` if the fence refuses `token`.
    fn begin(&mut self, worker: usize, seq: u64, token: Option<u64>) -> Option<u64> {
        if let Some(token) = token {
            let owner = *self.token_owner.entry(token).or_insert((worker, seq));
            if owner != (worker, seq) {
                self.duplicate_tokens.push(Instant::now());
            }
        }
        let accepted = self.admit(token);
        self.by_seq.insert((worker, seq), self.sections.len());
        self.sections.push(Section {
            worker,
            begin: Instant::now(),
            begin_accepted: accepted,
            written: None,
            end: None,
        });
        if accepted {
            self.open = Some((worker, seq));
        }
        accepted.then_some(self.value)
    }

    /// A section writes `read + 1`; whether the fence let it.
    fn write(
        &mut self,
        worker: usize,
        seq: u64,
        token: Option<u64>,
        read: u64,
        held: bool,
    ) -> bool {
        if !held {
            self.writes_after_loss.push(Instant::now());
        }
        if !self.admit(token) {
            return false;
        }
        if read != self.value {
            self.lost_updates.push(Instant::now());
        }
        self.value = read + 1;
        if let Some(&index) = self.by_seq.get(&(worker, seq)) {
            self.sections[index].written = Some(Instant::now());
        }
        true
    }

    /// A section is over (its lock released).
    fn end(&mut self, worker: usize, seq: u64) {
        if let Some(&index) = self.by_seq.get(&(worker, seq)) {
            self.sections[index].end = Some(Instant::now());
        }
        if self.open == Some((worker, seq)) {
            self.open = None;
        }
    }
}

/// The resource's server, recording into a [`History`] until it is dropped.
pub(crate) struct Resource {
    address: SocketAddr,
    history: Arc<Mutex<History>>,
    serving: JoinHandle<()>,
}

impl Resource {
    /// Listens on a free loopback port.
    pub(crate) async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let history = Arc::new(Mutex::new(History::default()));
        let serving = tokio::spawn(serve(listener, Arc::clone(&history)));
        Ok(Self {
            address,
            history,
            serving,
        })
    }

    pub(crate) const fn address(&self) -> SocketAddr {
        self.address
    }

    /// The worker in an accepted critical section right now, if any: a fault's target.
    pub(crate) fn holder(&self) -> Option<usize> {
        lock(&self.history).open.map(|(worker, _)| worker)
    }

    /// Forgets `worker` as the holder: it was killed, and will never end its section.
    pub(crate) fn forget_holder(&self, worker: usize) {
        let mut history = lock(&self.history);
        if history.open.is_some_and(|(holder, _)| holder == worker) {
            history.open = None;
        }
    }

    /// Records a fault, as the resource's clock saw it.
    pub(crate) fn record_fault(&self, window: FaultWindow) {
        lock(&self.history).faults.push(window);
    }

    /// Stops serving and hands over what was recorded.
    pub(crate) fn finish(self) -> History {
        self.serving.abort();
        std::mem::take(&mut *lock(&self.history))
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

fn lock(history: &Mutex<History>) -> MutexGuard<'_, History> {
    history
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn serve(listener: TcpListener, history: Arc<Mutex<History>>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        connections.spawn(connection(stream, Arc::clone(&history)));
    }
}

/// Serves one worker's connection. A line cut off by the connection's end (a worker killed or
/// cancelled mid-message) is ignored: the resource never acted on it.
async fn connection(stream: TcpStream, history: Arc<Mutex<History>>) {
    let (input, mut output) = stream.into_split();
    let mut input = BufReader::new(input);
    let mut worker = None;
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) if !line.ends_with('\n') => return,
            Ok(_) => {}
        }
        let reply = handle(&line, &mut worker, &history);
        if let Some(reply) = reply
            && output.write_all(reply.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

/// One message: what it changes, and the reply to send, if any.
fn handle(line: &str, worker: &mut Option<usize>, history: &Mutex<History>) -> Option<String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    // A token of `-` parses as none: an unfenced grant.
    let number = |index: usize| {
        fields
            .get(index)
            .and_then(|field| field.parse::<u64>().ok())
    };
    let mut history = lock(history);
    match fields.first().copied() {
        Some("HELLO") => {
            *worker = number(1).and_then(|id| usize::try_from(id).ok());
            None
        }
        Some("BEGIN") => Some(match history.begin((*worker)?, number(1)?, number(2)) {
            Some(value) => format!("OK {value}\n"),
            None => "STALE\n".to_owned(),
        }),
        Some("WRITE") => {
            let (seq, token, read, held) = (number(1)?, number(2), number(3)?, number(4)? == 1);
            let accepted = history.write((*worker)?, seq, token, read, held);
            Some(if accepted { "OK\n" } else { "STALE\n" }.to_owned())
        }
        Some("END") => {
            history.end((*worker)?, number(1)?);
            None
        }
        Some("LOST") => {
            history.losses += 1;
            None
        }
        Some("ERROR") => {
            let what = format!("{} {}", fields.get(1)?, fields.get(2)?);
            *history.errors.entry(what).or_default() += 1;
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_refuses_a_lower_token_and_lets_equal_and_higher_through() {
        let mut history = History::default();
        assert_eq!(history.begin(0, 0, Some(5)), Some(0));
        assert_eq!(
            history.begin(1, 0, Some(6)),
            Some(0),
            "a newer holder reads"
        );
        assert!(history.write(1, 0, Some(6), 0, true));
        assert!(
            !history.write(0, 0, Some(5), 0, true),
            "the old holder's write is stale"
        );
        assert_eq!(history.stale_rejected, 1);
        assert!(history.lost_updates.is_empty());
        assert_eq!(
            history.begin(0, 1, Some(5)),
            None,
            "a stale read is refused too"
        );
    }

    #[test]
    fn without_tokens_a_stale_write_is_a_lost_update() {
        let mut history = History::default();
        assert_eq!(history.begin(0, 0, None), Some(0));
        assert_eq!(history.begin(1, 0, None), Some(0));
        assert!(history.write(1, 0, None, 0, true));
        assert!(history.write(0, 0, None, 0, true));
        assert_eq!(history.lost_updates.len(), 1);
    }

    #[test]
    fn counts_duplicate_tokens_and_writes_after_loss() {
        let mut history = History::default();
        history.begin(0, 0, Some(3));
        history.begin(1, 0, Some(3));
        assert_eq!(history.duplicate_tokens.len(), 1);
        history.write(0, 0, Some(3), 0, false);
        assert_eq!(history.writes_after_loss.len(), 1);
    }

    #[test]
    fn the_holder_is_the_open_accepted_section() {
        let mut history = History::default();
        history.begin(2, 7, Some(1));
        assert_eq!(history.open, Some((2, 7)));
        history.end(2, 7);
        assert_eq!(history.open, None);
    }
}
