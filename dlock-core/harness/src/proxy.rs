//! A TCP proxy between a client and a server, for cutting connections on command (`tc netem`
//! and iptables are not available to the tests).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Result;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forwards both ways.
    Pass,
    /// Closes every open connection, and every new one at once. Connections opened after
    /// switching back to another mode are served again.
    Cut,
    /// Forwards the client's bytes to the server and drops the server's answers, as if every
    /// reply were lost on the way back.
    DropReplies,
    /// Forwards the client's bytes at once and the server's answers late: each reply reaches
    /// the client this long after the server sent it, in order (a slow or congested path, or
    /// a client whose replies sit in its socket buffer while it stalls).
    DelayReplies(Duration),
    /// Forwards on the connections already open; a new connection is accepted but carries
    /// nothing until the proxy is switched to another mode, as if its path were slow.
    HoldNew,
    /// Forwards both ways until a client's write of more than `over` bytes (a request; a
    /// keep-alive ping is shorter), after `passing` such writes have passed: that write
    /// reaches the server, then every open connection is cut and the proxy passes again — a
    /// connection that died right after a request went out (applied or not, its reply lost).
    CutAfterRequest {
        /// Writes of at most this many bytes pass and are not counted.
        over: usize,
        /// How many counted writes pass before the one that is cut.
        passing: u32,
    },
}

/// A loopback TCP proxy to one server, stopped (and every connection closed) when dropped.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(server: &dlock_harness::ZkServer) -> dlock_harness::Result<()> {
/// use dlock_harness::{ProxyMode, TcpProxy};
/// let proxy = TcpProxy::start(server.connect_string().parse().unwrap()).await?;
/// let url = format!("zk://{}", proxy.address()); // clients connect here
/// proxy.set(ProxyMode::Cut); // ... and are cut off
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TcpProxy {
    address: SocketAddr,
    mode: Arc<watch::Sender<State>>,
    accepted: Arc<AtomicU64>,
    accepting: JoinHandle<()>,
}

/// The mode, and how many cuts there were: a connection opened before a cut is closed even if
/// the proxy was switched back before the connection's task looked.
#[derive(Debug, Clone, Copy)]
struct State {
    mode: ProxyMode,
    cuts: u64,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `server`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`](super::HarnessError::Io) if no port can be bound.
    pub async fn start(server: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let mode = Arc::new(watch::Sender::new(State {
            mode: ProxyMode::Pass,
            cuts: 0,
        }));
        let accepted = Arc::new(AtomicU64::new(0));
        let accepting = tokio::spawn(accept(
            listener,
            server,
            Arc::clone(&mode),
            Arc::clone(&accepted),
        ));
        Ok(Self {
            address,
            mode,
            accepted,
            accepting,
        })
    }

    /// Where clients connect.
    #[must_use]
    pub const fn address(&self) -> SocketAddr {
        self.address
    }

    /// How many connections clients have opened to the proxy so far, cut ones included: a
    /// client that gave up on its connection and reconnected has opened one more.
    #[must_use]
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Switches what the proxy does, for open connections and new ones.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.send_modify(|state| {
            state.mode = mode;
            if mode == ProxyMode::Cut {
                state.cuts += 1;
            }
        });
    }
}

/// One [`TcpProxy`] in front of each of a service's loopback ports, and the service's URL
/// with every `127.0.0.1:<port>` in it pointing at its proxy instead; dropped together.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(server: &dlock_harness::EtcdServer) -> dlock_harness::Result<()> {
/// use std::time::Duration;
/// let proxies = dlock_harness::Proxies::in_front_of(&server.url(), &[server.port()]).await?;
/// let url = proxies.url(); // clients connect here
/// proxies.cut_for(Duration::from_secs(2)).await; // every connection cut, then served again
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Proxies {
    url: String,
    proxies: Vec<TcpProxy>,
}

impl Proxies {
    /// Proxies in front of `ports` (on 127.0.0.1), and `url` rewritten to use them.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`](super::HarnessError::Io) if a proxy cannot bind a port.
    pub async fn in_front_of(url: &str, ports: &[u16]) -> Result<Self> {
        let mut proxied = Self {
            url: url.to_owned(),
            proxies: Vec::with_capacity(ports.len()),
        };
        for port in ports {
            let address = format!("127.0.0.1:{port}");
            let proxy = TcpProxy::start(SocketAddr::from(([127, 0, 0, 1], *port))).await?;
            proxied.url = proxied.url.replace(&address, &proxy.address().to_string());
            proxied.proxies.push(proxy);
        }
        Ok(proxied)
    }

    /// The service's URL through the proxies.
    #[must_use]
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Cuts every connection (and refuses new ones) for `down`, then serves again.
    pub async fn cut_for(&self, down: Duration) {
        self.proxies
            .iter()
            .for_each(|proxy| proxy.set(ProxyMode::Cut));
        tokio::time::sleep(down).await;
        self.proxies
            .iter()
            .for_each(|proxy| proxy.set(ProxyMode::Pass));
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.set(ProxyMode::Cut);
        self.accepting.abort();
    }
}

async fn accept(
    listener: TcpListener,
    server: SocketAddr,
    mode: Arc<watch::Sender<State>>,
    accepted: Arc<AtomicU64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        accepted.fetch_add(1, Ordering::SeqCst);
        if mode.borrow().mode == ProxyMode::Cut {
            continue; // dropped: closed at once
        }
        tokio::spawn(forward(client, server, Arc::clone(&mode)));
    }
}

/// Forwards one connection until either side closes it or the proxy cuts it.
async fn forward(client: TcpStream, server: SocketAddr, switch: Arc<watch::Sender<State>>) {
    let mut mode = switch.subscribe();
    let opened_after = mode.borrow_and_update().cuts;
    if mode.borrow().mode == ProxyMode::HoldNew
        && mode
            .wait_for(|state| state.mode != ProxyMode::HoldNew)
            .await
            .is_err()
    {
        return;
    }
    let Ok(upstream) = TcpStream::connect(server).await else {
        return;
    };
    let (mut client_in, client_out) = client.into_split();
    let (mut server_in, mut server_out) = upstream.into_split();
    let (replies, queued) = mpsc::unbounded_channel();
    let mut delivering = tokio::spawn(deliver(queued, client_out));
    let (mut asked, mut answered) = (vec![0_u8; 16 * 1024], vec![0_u8; 16 * 1024]);
    loop {
        tokio::select! {
            read = client_in.read(&mut asked) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if server_out.write_all(&asked[..n]).await.is_err() {
                        break;
                    }
                    if cut_after(&switch, n) {
                        delivering.abort(); // nothing more reaches the client
                        return;
                    }
                }
            },
            read = server_in.read(&mut answered) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = match mode.borrow().mode {
                        ProxyMode::DropReplies => continue,
                        ProxyMode::DelayReplies(delay) => Instant::now() + delay,
                        _ => Instant::now(),
                    };
                    if replies.send((due, answered[..n].to_vec())).is_err() {
                        break;
                    }
                }
            },
            changed = mode.changed() => {
                if changed.is_err() || mode.borrow().cuts != opened_after {
                    delivering.abort(); // a cut: what is still queued is lost with it
                    return;
                }
            }
        }
    }
    // The server or the client closed: the server sees it now; what was already answered
    // still reaches the client, then its side closes — unless the proxy is cut meanwhile.
    drop((replies, server_in, server_out));
    tokio::select! {
        _ = &mut delivering => {}
        _ = mode.wait_for(|state| state.cuts != opened_after) => delivering.abort(),
    }
}

/// In [`ProxyMode::CutAfterRequest`], counts a client's write of `written` bytes, and cuts
/// every connection (and passes from then on) at the one to cut; `true` when it did.
fn cut_after(switch: &watch::Sender<State>, written: usize) -> bool {
    switch.send_if_modified(|state| match &mut state.mode {
        ProxyMode::CutAfterRequest { over, passing } if written > *over => {
            if *passing > 0 {
                *passing -= 1;
                return false; // counted, and passed: no one is told
            }
            state.mode = ProxyMode::Pass;
            state.cuts += 1;
            true
        }
        _ => false,
    })
}

/// Writes the server's answers to the client, each no earlier than its due time, in order.
async fn deliver(
    mut queued: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    mut client_out: OwnedWriteHalf,
) {
    while let Some((due, bytes)) = queued.recv().await {
        tokio::time::sleep_until(due).await;
        if client_out.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server that echoes every byte back.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut input, mut output) = stream.split();
                    let _ = tokio::io::copy(&mut input, &mut output).await;
                });
            }
        });
        address
    }

    #[tokio::test]
    async fn delayed_replies_arrive_late_then_pass_again() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        let delay = Duration::from_millis(300);
        proxy.set(ProxyMode::DelayReplies(delay));
        let sent = Instant::now();
        client.write_all(b"late").await.unwrap();
        let mut echoed = [0_u8; 4];
        client.read_exact(&mut echoed).await.unwrap();
        assert!(
            sent.elapsed() >= delay,
            "a delayed reply never arrives early"
        );
        assert_eq!(&echoed, b"late");
        proxy.set(ProxyMode::Pass);
        client.write_all(b"now!").await.unwrap();
        client.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"now!", "the same connection carries on");
    }

    #[tokio::test]
    async fn a_request_over_the_size_is_sent_then_cut_once() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.set(ProxyMode::CutAfterRequest {
            over: 4,
            passing: 1,
        });
        let mut echoed = [0_u8; 4];
        client.write_all(b"ping").await.unwrap();
        client.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"ping", "a write of the size itself passes");
        let mut echoed = [0_u8; 5];
        client.write_all(b"first").await.unwrap();
        client.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"first", "the write let pass");
        client.write_all(b"request").await.unwrap();
        let mut rest = Vec::new();
        let closed = client.read_to_end(&mut rest).await;
        assert!(
            closed.is_err() || rest.is_empty(),
            "the connection is cut, its reply lost: {rest:?}"
        );
        let mut again = TcpStream::connect(proxy.address()).await.unwrap();
        again.write_all(b"longer than four").await.unwrap();
        let mut echoed = [0_u8; 16];
        again.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"longer than four", "one cut, then it passes");
    }
}
